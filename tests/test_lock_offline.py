"""`harness lock` fills the cache for `offline = true` stacks: the sdists and every pinned source
vLLM's CMake would clone, minus what a patch leaves out, so that the build needs no network.

Real pieces, no internet: a local HTTP server answering PyPI's JSON API, its simple index and the
sdist files (small tarballs made here: only their sha256 matters to this step); git repositories
made here with the real `git`, handed to `harness lock --mirror URL=PATH` as a user hands a local
clone; an https URL on a loopback port where nothing listens, for a host without network.
The source table is a small one made here in the shape of harness/data/sources/vllm-*.toml.
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import socket
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from support.gitrepo import make_repo, run_git

from harness import http, lock
from harness.cli import main
from harness.image import offline, sources

VLLM, FI = "0.33.0", "0.7.2.post1"


def _sdist(top: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = b"[project]\nname = 'stand-in'\n"
        info = tarfile.TarInfo(f"{top}/pyproject.toml")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


FILES = {"vllm-0.33.0.tar.gz": _sdist("vllm-0.33.0"),
         "flashinfer_python-0.7.2.post1.tar.gz": _sdist("flashinfer_python-0.7.2.post1")}
PROJECTS = {"vllm": (VLLM, "vllm-0.33.0.tar.gz"), "flashinfer-python": (FI, "flashinfer_python-0.7.2.post1.tar.gz")}


class Index(BaseHTTPRequestHandler):
    """PyPI's per-project JSON, its simple index page and the files it links."""

    seen: list[str] = []

    def do_GET(self):  # noqa: N802 - http.server's name
        Index.seen.append(self.path)
        parts = self.path.strip("/").split("/")
        if parts[0] == "pypi" and len(parts) == 3 and parts[1] in PROJECTS:
            version, fname = PROJECTS[parts[1]]
            entry = {"filename": fname, "packagetype": "sdist",
                     "digests": {"sha256": hashlib.sha256(FILES[fname]).hexdigest()}}
            self._send(200, json.dumps({"info": {"version": version}, "releases": {version: [entry]}}).encode(),
                       "application/json")
        elif parts[0] == "simple" and len(parts) == 2 and parts[1] in PROJECTS:
            fname = PROJECTS[parts[1]][1]
            sha = hashlib.sha256(FILES[fname]).hexdigest()
            self._send(200, f'<a href="/files/{fname}#sha256={sha}">{fname}</a>'.encode(), "text/html")
        elif parts[0] == "files" and len(parts) == 2 and parts[1] in FILES:
            self._send(200, FILES[parts[1]], "application/octet-stream")
        else:
            self._send(404, b"not found", "text/plain")

    def _send(self, code: int, body: bytes, ctype: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass




def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


MATRIX = """
[matrix]
name = "t"
hardware = "h"
[hardware.h]
cc = "12.1"
bandwidth_gbs = 1
memory_gib = 1
[stacks.src]
offline = true
torch_cuda_arch_list = "12.1a"
base_image = {{ repository = "root", tag = "local", local = true }}
torch = {{ version = "2.14.0" }}
vllm = {{ pypi = "{vllm}", patches = ["vllm/0001-leave-out-extra.patch"] }}
flashinfer = {{ version = "{fi}", cubin = false }}
[models.m]
checkpoint = "org/m"
quantization = "fp8"
active_params_b = 1
bytes_per_param = 1
[configs.c]
"""

PATCH = """From: t
Subject: leave out what this test's build does not read
Leaves-out: extra

diff --git a/x b/x
"""


@pytest.fixture
def world(tmp_path, monkeypatch):
    """A repository with an offline matrix, a source table pinning two git trees (one left out by
    the stack's patch), a local index, and an empty cache."""
    root = tmp_path / "proj"
    (root / "matrix").mkdir(parents=True)
    (root / "patches" / "vllm").mkdir(parents=True)
    run_git("init", "-q", cwd=root)
    (root / "patches" / "vllm" / "0001-leave-out-extra.patch").write_text(PATCH)
    (root / "matrix" / "t.toml").write_text(MATRIX.format(vllm=VLLM, fi=FI))

    git = tmp_path / "git"
    kern = make_repo(git / "kern", {"CMakeLists.txt": "project(k)\n", "include/k.h": "int k;\n", "docs/x.md": "no\n"})
    extra = make_repo(git / "extra", {"e.py": "pass\n"})
    urls = {"kern": f"https://127.0.0.1:{_closed_port()}/kern.git",
            "extra": f"https://127.0.0.1:{_closed_port()}/extra.git"}
    tree = tmp_path / "trim"
    offline.assemble(offline.Pin("kern", urls["kern"], kern, "KERN_SRC_DIR", ("CMakeLists.txt", "include"), (), ""),
                     {urls["kern"]: str(git / "kern")}, tree)
    tables = tmp_path / "tables"
    tables.mkdir()
    (tables / f"vllm-{VLLM}.toml").write_text(f'''vllm = "{VLLM}"
read_from = "made by tests/test_lock_offline.py"
[[sources]]
name = "kern"
url = "{urls['kern']}"
commit = "{kern}"
env = "KERN_SRC_DIR"
declared_in = "CMakeLists.txt"
keep = ["CMakeLists.txt", "include"]
sha256 = "{offline.tree_sha256(tree)}"
[[sources]]
name = "extra"
url = "{urls['extra']}"
commit = "{extra}"
env = "EXTRA_SRC_DIR"
declared_in = "CMakeLists.txt"
keep = ["e.py"]
sha256 = "{'0' * 64}"
''')
    server = ThreadingHTTPServer(("127.0.0.1", 0), Index)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setattr(lock, "PYPI_VERSION_JSON", base + "/pypi/{name}/{version}/json")
    monkeypatch.setattr(lock, "PYPI_PROJECT_JSON", base + "/pypi/{name}/json")
    monkeypatch.setattr(sources, "SIMPLE_INDEX", base + "/simple/{name}/")
    monkeypatch.setattr(http, "ALLOW_LOOPBACK_HTTP", True)
    monkeypatch.setattr(offline, "TABLES", tables)
    cache = tmp_path / "cache"
    monkeypatch.setattr(offline, "OFFLINE", cache / "offline")
    monkeypatch.setattr(sources, "CACHE", cache / "sources")
    monkeypatch.setattr(sources, "SDIST_CACHE", cache / "sdist")
    monkeypatch.chdir(root)
    Index.seen = []
    yield {"matrix": root / "matrix" / "t.toml", "git": git, "urls": urls, "kern": kern, "cache": cache}
    server.shutdown()
    server.server_close()


def _mirror(w) -> list[str]:
    return ["--mirror", f"{w['urls']['kern']}={w['git'] / 'kern'}"]


def test_lock_fetches_what_an_offline_build_reads_and_checks_it_when_cached(world, capsys):
    w = world
    assert main(["lock", "-m", str(w["matrix"]), *_mirror(w)]) == 0
    out = capsys.readouterr().out
    archive = w["cache"] / "offline" / f"kern-{w['kern'][:12]}.tar.xz"
    assert archive.is_file()
    assert not list((w["cache"] / "offline").glob("extra-*"))  # left out by the stack's patch: not fetched
    assert f"kern-{w['kern'][:12]}.tar.xz" in out and f"fetched from {w['git'] / 'kern'}" in out
    assert "vllm-0.33.0.tar.gz" in out and "downloaded from PyPI, sha256 checked" in out
    assert (w["cache"] / "sources" / "vllm-0.33.0.tar.gz").read_bytes() == FILES["vllm-0.33.0.tar.gz"]
    assert "/files/vllm-0.33.0.tar.gz" in Index.seen and "/files/flashinfer_python-0.7.2.post1.tar.gz" in Index.seen
    with tarfile.open(archive) as t:
        assert sorted(m.name for m in t.getmembers() if m.isfile()) == ["CMakeLists.txt", "include/k.h"]

    # again, with no mirror and no network to the git host: everything is cached, and checked
    Index.seen = []
    assert main(["lock", "-m", str(w["matrix"])]) == 0
    out = capsys.readouterr().out
    assert "cached, content sha256 checked" in out and "cached, sha256 checked" in out
    assert not [p for p in Index.seen if p.startswith("/files/")]


def test_no_network_to_the_source_is_one_error_naming_it_and_the_fix(world, capsys):
    assert main(["lock", "-m", str(world["matrix"])]) == 3
    err = " ".join(capsys.readouterr().err.split())
    assert "cannot get the pinned source kern" in err and world["urls"]["kern"] in err
    assert "Traceback" not in err
    assert f"harness sources fetch -m {world['matrix']} --from DIR" in err
    assert "extra" not in err.split("fix:")[0]  # the left-out source is never asked for


def test_a_corrupted_cached_archive_is_refused_naming_the_source(world, capsys):
    w = world
    assert main(["lock", "-m", str(w["matrix"]), *_mirror(w)]) == 0
    archive = w["cache"] / "offline" / f"kern-{w['kern'][:12]}.tar.xz"
    archive.write_bytes(archive.read_bytes()[: archive.stat().st_size // 2])  # truncated on its way through a USB stick
    capsys.readouterr()
    assert main(["lock", "-m", str(w["matrix"]), *_mirror(w)]) == 3
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith("error: kern: ") and "is not a readable archive" in err
    assert f"delete {archive}" in err
    # an archive that unpacks but holds other content
    evil = w["git"].parent / "evil"
    (evil / "include").mkdir(parents=True)
    (evil / "CMakeLists.txt").write_text("project(k)\n")
    (evil / "include" / "k.h").write_text("int k = 1;\n")
    archive.unlink()
    offline.pack(evil, archive)
    assert main(["lock", "-m", str(w["matrix"]), *_mirror(w)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert err.startswith("error: kern: ") and "not the pinned" in err


def test_an_offline_stack_needing_an_unpinned_source_is_refused_before_any_network(world, capsys):
    table = offline.TABLES / f"vllm-{VLLM}.toml"
    table.write_text(table.read_text() + '[[unpinned]]\nname = "tk"\nurl = "https://example.invalid/tk.git"\n'
                     'env = "TK_SRC_DIR"\ndeclared_in = "cmake/x.cmake"\n')
    assert main(["lock", "-m", str(world["matrix"])]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "stacks.src: vLLM 0.33.0's CMake fetches tk, which vllm-0.33.0.toml does not pin" in err
    assert Index.seen == [] and not world["matrix"].with_suffix(".lock").exists()


def test_sources_fetch_carries_the_cache_to_an_air_gapped_host(world, capsys, tmp_path):
    w = world
    usb = tmp_path / "usb"
    assert main(["sources", "fetch", "-m", str(w["matrix"]), *_mirror(w), "--out", str(usb)]) == 0
    assert sorted(p.name for p in usb.iterdir()) == sorted([*FILES, f"kern-{w['kern'][:12]}.tar.xz"])
    for sub in ("offline", "sources", "sdist"):  # the other host's cache is empty
        shutil.rmtree(w["cache"] / sub, ignore_errors=True)
    Index.seen = []
    capsys.readouterr()
    assert main(["sources", "fetch", "-m", str(w["matrix"]), "--from", str(usb)]) == 0
    out = capsys.readouterr().out
    assert out.count(f"taken from {usb}") == 3 and Index.seen == []  # nothing asked of the index or git
    assert (w["cache"] / "offline" / f"kern-{w['kern'][:12]}.tar.xz").read_bytes() == \
        (usb / f"kern-{w['kern'][:12]}.tar.xz").read_bytes()


def test_a_bad_mirror_flag_is_bad_input_before_any_network(world, capsys):
    assert main(["lock", "-m", str(world["matrix"]), "--mirror", "https://example.invalid/x.git"]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert "--mirror 'https://example.invalid/x.git': expected URL=PATH with PATH a local git folder" in err
    assert Index.seen == []
