"""Every file, removal, folder walk, archive, subprocess, URL, socket and console line of harness/
goes through the choke points (tools/boundary.py); the listed exceptions each carry a reason and
a count, none is stale, and the check sees through the ways a use can be written to hide it."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import boundary  # noqa: E402


def test_harness_uses_files_processes_urls_and_the_terminal_only_through_the_choke_points():
    bad, stale = boundary.check(ROOT)
    assert [str(u) for u in bad] == []
    assert stale == []
    assert len(boundary.modules(ROOT)) > 50  # it read the package, not an empty folder


def test_every_exception_says_why_and_counts_its_uses():
    assert all(n >= 1 and len(why) > 20 for n, why in boundary.EXCEPTIONS.values())
    assert all(len(key) == 3 for key in boundary.EXCEPTIONS)  # (module, kind, function)


def _kinds(source: str) -> list[str]:
    return sorted(u.kind for u in boundary.uses(ast.parse(source), "harness.x"))


def test_the_check_sees_each_kind_of_direct_use():
    assert _kinds("open('x')") == ["file"]
    assert _kinds("from pathlib import Path\nPath('x').read_text()") == ["file"]
    assert _kinds("p.write_bytes(b'')") == ["file"]
    assert _kinds("p.open('wb')") == ["file"]
    assert _kinds("import os\nos.walk('.')") == ["walk"]
    assert _kinds("p.rglob('*')") == ["walk"]
    assert _kinds("import tarfile") == ["tarfile"]
    assert _kinds("import subprocess") == ["subprocess"]
    assert _kinds("from subprocess import run") == ["subprocess"]
    assert _kinds("import urllib.request") == ["http"]
    assert _kinds("from urllib import request") == ["http"]
    assert _kinds("print('x')") == ["print"]
    assert _kinds("proc.run(['git', 'archive', ref])") == ["git"]  # git only through harness/git.py


# The ways a use can be written so that a name-matching check misses it: each must be counted as
# the kind it is. (24 and more: every miss the last battery found is here, and their cousins.)
EVASIONS = [
    ("__import__('subprocess').run(['ls'])", "subprocess"),
    ("import importlib\nimportlib.import_module('subprocess')", "subprocess"),
    ("import importlib as il\nil.import_module(name)", "dynamic"),
    ("import os\nos.system('ls')", "subprocess"),
    ("from os import system as s\ns('ls')", "subprocess"),
    ("import os as o\no.popen('ls')", "subprocess"),
    ("import os\nos.execv('/bin/ls', ['ls'])", "subprocess"),
    ("import os\nos.spawnlp(os.P_WAIT, 'ls', 'ls')", "subprocess"),
    ("import os\ngetattr(os, 'system')('ls')", "subprocess"),
    ("import os\ngetattr(os, name)('ls')", "dynamic"),
    ("import sys\nsys.modules['os'].system('x')", "subprocess"),
    ("import os\nvars(os)['system']('x')", "subprocess"),
    ("import os\nos.__dict__['system']('ls')", "subprocess"),
    ("from os import *", "dynamic"),
    ("exec('import os')", "exec"),
    ("eval('1')", "exec"),
    ("from pathlib import Path\nPath('x').open()", "file"),
    ("f = open\nf('x')", "file"),
    ("import io\nio.open('x')", "file"),
    ("import shutil\nshutil.rmtree(p)", "remove"),
    ("from shutil import rmtree as rt\nrt(p)", "remove"),
    ("import os\nos.unlink(p)", "remove"),
    ("import os\nlist(map(os.remove, paths))", "remove"),  # passed as a value, never called here
    ("from pathlib import Path\nPath(p).unlink()", "remove"),
    ("import os\nos.rename(a, b)", "rename"),
    ("from pathlib import Path\nPath(a).replace(b)", "rename"),
    ("import os\nos.utime(p)", "utime"),
    ("import http.client", "http"),
    ("from http import client\nclient.HTTPConnection('h')", "http"),
    ("import socket as so\nso.create_connection(('h', 1))", "socket"),
    ("import asyncio\nasyncio.open_connection('h', 1)", "socket"),
    ("import zipfile\nzipfile.ZipFile(p).extractall(d)", "zipfile"),
    ("z.extractall(d)", "zipfile"),
    ("import sys\nsys.stdout.write('x')", "print"),
    ("import builtins\nbuiltins.print('x')", "print"),
    ("import glob\nglob.glob('*')", "walk"),
    ("from harness import proc\nproc.run(['/usr/bin/git', 'log'])", "git"),
    ("import shutil\nfrom harness import proc\ngit = shutil.which('git')\nproc.run([git, 'log'])", "git"),
    ("from harness import proc\ncmd = ['git', 'log']\nproc.run(cmd)", "git"),
]


@pytest.mark.parametrize(("source", "kind"), EVASIONS, ids=[s.splitlines()[-1][:40] for s, _ in EVASIONS])
def test_an_evasion_is_counted_as_what_it_is(source, kind):
    assert kind in _kinds(source), source


NOT_USES = [
    "from harness.results.store import RunStore\nRunStore.open(d)",  # a class method named open, no mode
    "text.replace('a', 'b')",  # str.replace: two arguments
    "import dataclasses\ndataclasses.replace(o, a=1)",
    "self.head.exec(['python3'])",  # a container's exec method, not the builtin
    "import ast\nast.literal_eval(x)",
    "import re\nre.compile(x)",
    "from urllib.parse import urlsplit\nurlsplit(u)",  # string work
    "import os\nos.path.join(a, b)",
    "import socket\nsocket.gethostname()",
    "from typing import Literal\nk: Literal['git', 'releases']",  # a type, not a command line
    "from harness.safety import writes\nwrites.write_text(p, 'x')",  # through the choke point
    "x.get('git')",
]


@pytest.mark.parametrize("source", NOT_USES)
def test_what_is_not_a_use_is_not_counted(source):
    assert _kinds(source) == []


def _tree(tmp_path: Path, source: str) -> Path:
    pkg = tmp_path / "harness"
    pkg.mkdir(exist_ok=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "newcmd.py").write_text(source)
    return tmp_path


def test_a_new_direct_use_fails_the_check(tmp_path):
    bad, _stale = boundary.check(_tree(tmp_path, "def go(p):\n    return open(p).read()\n"), {})
    assert [(u.module, u.kind, u.function) for u in bad] == [("harness.newcmd", "file", "go")]


def test_a_reason_covers_only_the_uses_it_counts_in_the_function_it_names(tmp_path):
    root = _tree(tmp_path, "import os\n\ndef go(p):\n    os.unlink(p)\n\ndef other(p):\n    os.unlink(p)\n")
    listed = {("harness.newcmd", "remove", "go"): (1, "removes the file go wrote itself")}
    bad, stale = boundary.check(root, listed)
    assert [(u.function, u.line) for u in bad] == [("other", 7)] and stale == []
    # a second use in the same function is past the count
    root = _tree(tmp_path, "import os\n\ndef go(p):\n    os.unlink(p)\n    os.remove(p)\n")
    bad, _ = boundary.check(root, listed)
    assert len(bad) == 2 and "2 uses here, 1 listed" in str(bad[0])
    # an entry counting more than there are is stale
    root = _tree(tmp_path, "def go(p):\n    return p\n")
    bad, stale = boundary.check(root, listed)
    assert bad == [] and len(stale) == 1 and "counts 1 use(s), 0 found" in stale[0]


def test_the_command_fails_on_a_direct_use(tmp_path, capsys):
    root = _tree(tmp_path, "import os\nos.system('id')\n")
    assert boundary.main([str(root)]) == 1
    out = capsys.readouterr().out
    assert "direct: harness.newcmd:2: os.system (subprocess, in <module>)" in out
