"""tools/vllm_log_catalog.py end to end, offline: a local server answers in the shape of PyPI's
JSON API (relative file links, as a PyPI mirror gives them) and serves a real sdist tarball built
here; the script picks the newest final patch of each minor, checks the sha256, parses the
package with `ast` and writes the per-release summary the upstream test reads."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from harness import http

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("vllm_log_catalog", ROOT / "tools" / "vllm_log_catalog.py")
catalog = importlib.util.module_from_spec(spec)
spec.loader.exec_module(catalog)  # type: ignore[union-attr]

ENGINE = '''
from vllm.logger import init_logger
logger = init_logger(__name__)

def run():
    logger.info("Using %s for %s GEMM", "CutlassNvFp4LinearKernel", "NVFP4")
    logger.info("Added request %s.", 7)
    logger.error("EngineCore encountered a fatal error.")
'''


# The C++ side (vLLM csrc/): a check with a message, one without, a CUTLASS status caller, a throw
# and a printf, each as vLLM's kernels write them.
CSRC = r'''
// TORCH_CHECK(false, "a comment is not a message");
void gemm(torch::Tensor& a, int64_t n) {
  TORCH_CHECK(a.is_contiguous(), "a must be contiguous, got stride ", a.stride(0));
  TORCH_CHECK(n > 0);
  TORCH_CHECK_NOT_IMPLEMENTED(false, "No compiled cutlass_scaled_mm for CUDA device capability: ", n);
  if (n > 7) throw std::runtime_error("max supported block limit is " + std::to_string(n));
  printf("CUDA error: %s at %s:%d\n", cudaGetErrorString(err), __FILE__, __LINE__);
}
'''


def _sdist(version: str) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in ((f"vllm-{version}/vllm/v1/engine/core.py", ENGINE),
                           (f"vllm-{version}/vllm/broken.py", "def (:\n"),
                           (f"vllm-{version}/tests/test_x.py", ENGINE),
                           (f"vllm-{version}/csrc/gemm.cu", CSRC),
                           (f"vllm-{version}/tests/kernels/x.cu", CSRC)):
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


@pytest.fixture
def pypi(monkeypatch, tmp_path):
    files = {"vllm-0.9.2.tar.gz": _sdist("0.9.2")}
    sha = hashlib.sha256(files["vllm-0.9.2.tar.gz"]).hexdigest()

    def rec(name, digest=sha, yanked=False):
        return {"filename": name, "packagetype": "sdist", "url": f"../../files/{name}",
                "digests": {"sha256": digest}, "yanked": yanked}

    index = {"releases": {
        "0.7.3": [rec("vllm-0.7.3.tar.gz")],          # below the floor
        "0.9.0": [rec("vllm-0.9.0.tar.gz")],          # an older patch of the same minor
        "0.9.2": [rec("vllm-0.9.2.tar.gz")],
        "0.10.0rc1": [rec("vllm-0.10.0rc1.tar.gz")],  # a pre-release
        "0.10.1": [rec("vllm-0.10.1.tar.gz", "0" * 64)],  # served with another sha256
    }}
    files["vllm-0.10.1.tar.gz"] = _sdist("0.10.1")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):  # noqa: N802 - http.server's name
            if self.path == "/pypi/vllm/json":
                body = json.dumps(index).encode()
            elif self.path.startswith("/files/") and self.path[7:] in files:
                body = files[self.path[7:]]
            else:
                self.send_response(404)
                self.end_headers()
                return
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setattr(http, "ALLOW_LOOPBACK_HTTP", True)
    monkeypatch.setattr(catalog, "PYPI", f"http://127.0.0.1:{server.server_address[1]}/pypi")
    monkeypatch.setattr(catalog, "CACHE", tmp_path / "cache")
    yield tmp_path
    server.shutdown()


def test_newest_final_patch_of_each_minor_from_the_floor(pypi):
    assert [v for v, _ in catalog.releases("vllm")] == ["0.9.2", "0.10.1"]


def test_one_release_is_fetched_parsed_and_summarised(pypi, capsys):
    out = pypi / "out"
    assert catalog.main(["--only", "vllm", "--versions", "0.9.2", "--out", str(out)]) == 0
    doc = json.loads((out / "vllm-0.9.2.json").read_text())
    assert doc["sha256"] == hashlib.sha256((pypi / "cache" / "vllm-0.9.2.tar.gz").read_bytes()).hexdigest()
    counts = doc["counts"]
    # tests/ is not the package; broken.py does not parse and is counted, not fatal
    assert (counts["files"], counts["unparsed_files"], counts["logger_calls"]) == (2, 1, 3)
    assert counts["dropped_logger_calls_by_level"] == {"INFO": 1}
    assert [(m["category"], m["template"], m["at"]) for m in doc["messages"]] == [
        ("linear", "Using {0} for {1} GEMM", "vllm/v1/engine/core.py:6"),
        ("fatal", "EngineCore encountered a fatal error.", "vllm/v1/engine/core.py:8"),
    ]


def test_the_cpp_messages_of_every_release_are_read_into_one_file(pypi, capsys):
    out = pypi / "out"
    assert catalog.main(["--only", "vllm", "--sources", "cpp", "--out", str(out)]) == 3  # 0.10.1's sha256
    counts, found = catalog.scan_cpp("vllm", pypi / "cache" / "vllm-0.9.2.tar.gz")
    assert counts["files"] == 1  # csrc/ only, not tests/
    got = [(m["kind"], m["exception"], m["template"], m["call"]) for m in found]
    assert got == [
        ("raise", "RuntimeError", "a must be contiguous, got stride {0}", "TORCH_CHECK"),
        ("raise", "RuntimeError", "Expected n > 0 to be true, but got false.", "TORCH_CHECK"),
        ("raise", "NotImplementedError", "No compiled cutlass_scaled_mm for CUDA device capability: {0}",
         "TORCH_CHECK_NOT_IMPLEMENTED"),
        ("raise", "RuntimeError", "max supported block limit is {0}", "throw std::runtime_error"),
        ("print", "", "CUDA error: {0} at {1}:{2}", "printf"),
    ]
    path = catalog.write_cpp("vllm", {"0.9.2": ({"filename": "vllm-0.9.2.tar.gz", "digests": {"sha256": "x"}},
                                                 counts, found)}, out)
    doc = json.loads(path.read_text())
    assert doc["distinct"] == 5 and doc["releases"]["0.9.2"]["counts"]["call:TORCH_CHECK"] == 2
    assert {m["first"] for m in doc["messages"]} == {"0.9.2"}


def test_versions_with_the_cpp_catalog_is_a_usage_error(pypi, capsys):
    with pytest.raises(SystemExit) as exc:
        catalog.main(["--only", "vllm", "--versions", "0.9.2", "--sources", "cpp"])
    assert exc.value.code == 2 and "cpp/<project>.json holds every release" in capsys.readouterr().err


def test_a_download_whose_sha256_differs_is_one_error_not_a_traceback(pypi, capsys):
    assert catalog.main(["--only", "vllm", "--versions", "0.10.1", "--out", str(pypi / "o")]) == 3
    err = capsys.readouterr().err
    assert "sha256 differs" in err and "Traceback" not in err
    assert not (pypi / "cache" / "vllm-0.10.1.tar.gz").exists()
