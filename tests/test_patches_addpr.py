"""`harness patches add-pr` against a local server that answers in GitHub's shapes."""

from __future__ import annotations

import datetime as dt
import http.server
import json
import threading
from pathlib import Path

import pytest

from harness.build.addpr import add_pr
from harness.build.preflight import apply_series
from harness.cli import main

REAL_PATCH = Path(__file__).resolve().parent.parent / "patches" / "vllm" / "0001-cmake-sm121a-on-cuda13.patch"
HEAD = "2bb3e9e67aa5f7b05b7f867cac780bba74bf3920"


@pytest.fixture
def github():
    body = REAL_PATCH.read_bytes()
    seen: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            seen.append(self.path)
            host = f"http://127.0.0.1:{self.server.server_port}"
            if self.path == "/repos/vllm-project/vllm/pulls/4242":
                data = json.dumps({"number": 4242, "title": "[Build] SM121a kernels on CUDA 13",
                                   "head": {"sha": HEAD, "ref": "sm121a"},
                                   "patch_url": f"{host}/vllm-project/vllm/pull/4242.patch"}).encode()
                ctype = "application/json"
            elif self.path == "/vllm-project/vllm/pull/4242.patch":
                data, ctype = body, "text/x-patch"
            else:
                self.send_error(404)
                return
            self.send_response(200)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *_a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}", seen
    server.shutdown()


def test_add_pr_writes_patch_with_provenance(github, tmp_path):
    base, seen = github
    when = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
    added = add_pr("vllm", 4242, base_url=base, patches_dir=tmp_path, now=when)
    assert added.head_sha == HEAD
    assert added.path == tmp_path / "vllm" / "pr4242-build-sm121a-kernels-on-cuda-13.patch"
    text = added.path.read_text()
    assert text.startswith("Provenance: vllm-project/vllm PR #4242: [Build] SM121a kernels on CUDA 13\n")
    assert f"Head-SHA: {HEAD}\n" in text and "Taken-on: 2026-11-30T12:00:00Z\n" in text
    assert text.endswith(REAL_PATCH.read_text())
    assert seen == ["/repos/vllm-project/vllm/pulls/4242", "/vllm-project/vllm/pull/4242.patch"]


@pytest.mark.network
def test_added_patch_still_applies(github, tmp_path):
    # the provenance header must not break `git apply`, on the real vLLM 0.33.0 sdist
    base, _ = github
    added = add_pr("vllm", 4242, base_url=base, patches_dir=tmp_path)
    tree = tmp_path / "tree"
    tree.mkdir()
    from harness.build import sources
    from harness.matrix.load import load_matrix

    spark = load_matrix(Path(__file__).resolve().parent.parent / "matrix" / "spark.toml")
    pristine = sources.tree(sources.vllm_source(spark.spec.stacks["spark-121a"]))
    (tree / "CMakeLists.txt").write_bytes((pristine / "CMakeLists.txt").read_bytes())
    assert apply_series(tree, [(added.path.name, added.path)]).ok


def test_cli(github, tmp_path, capsys):
    base, _ = github
    assert main(["patches", "add-pr", "vllm", "4242", "--base-url", base, "--patches-dir", str(tmp_path)]) == 0
    assert "pr4242-build-sm121a-kernels-on-cuda-13.patch" in capsys.readouterr().out


def test_unknown_pr_is_an_error(github, tmp_path):
    base, _ = github
    assert main(["patches", "add-pr", "vllm", "1", "--base-url", base, "--patches-dir", str(tmp_path)]) == 3
