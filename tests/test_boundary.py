"""Every file, folder walk, subprocess, URL and console line of harness/ goes through the choke
points (tools/boundary.py); the listed exceptions each carry a reason and none is stale."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import boundary  # noqa: E402


def test_harness_uses_files_processes_urls_and_the_terminal_only_through_the_choke_points():
    bad, stale = boundary.check(ROOT)
    assert [str(u) for u in bad] == []
    assert stale == []
    assert len(boundary.modules(ROOT)) > 50  # it read the package, not an empty folder


def test_every_exception_says_why():
    assert all(len(why) > 20 for why in boundary.EXCEPTIONS.values())


def _kinds(source: str) -> list[str]:
    return sorted(u.kind for u in boundary.uses(ast.parse(source), "harness.x"))


def test_the_check_sees_each_kind_of_direct_use():
    assert _kinds("open('x')") == ["file"]
    assert _kinds("from pathlib import Path\nPath('x').read_text()") == ["file"]
    assert _kinds("p.write_bytes(b'')") == ["file"]
    assert _kinds("p.open('wb')") == ["file"]
    assert _kinds("RunStore.open(run_dir)") == []  # not a file open: no mode
    assert _kinds("import os\nos.walk('.')") == ["walk"]
    assert _kinds("p.rglob('*')") == ["walk"]
    assert _kinds("import tarfile") == ["tarfile"]
    assert _kinds("import subprocess") == ["subprocess"]
    assert _kinds("from subprocess import run") == ["subprocess"]
    assert _kinds("import urllib.request") == ["urllib"]
    assert _kinds("from urllib import request") == ["urllib"]
    assert _kinds("from urllib.parse import urlsplit") == []  # pure string work
    assert _kinds("print('x')") == ["print"]
    assert _kinds("proc.run(['git', 'archive', ref])") == ["git"]  # git only through harness/git.py
    # through the safety modules it is not a direct use
    assert _kinds("from harness.safety import writes\nwrites.write_text(p, 'x')") == []


def test_a_new_direct_use_fails_the_check(tmp_path):
    pkg = tmp_path / "harness"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "newcmd.py").write_text("def go(p):\n    return open(p).read()\n")
    bad, _stale = boundary.check(tmp_path)
    assert [(u.module, u.kind) for u in bad] == [("harness.newcmd", "file")]
