"""A release list is a history too: `harness bisect pypi:NAME` against a local index that answers
in the shape of PyPI's JSON API (https://pypi.org/pypi/vllm/json as read on 2026-12-01: per
release, files with `filename`, `packagetype`, `url`, `upload_time`, `digests.sha256`; the
releases 0.15.0 and 0.15.1 of vLLM list wheels and no sdist, as this index's 2.1.x does)."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from harness import cli
from harness import http as hh
from harness.bisect import history as history_mod
from harness.bisect.history import ReleaseHistory

VERSIONS = ["1.0.0", "1.0.1", "1.1.0", "1.1.1", "1.1.2", "1.2.0", "2.0.0rc1", "2.0.0", "2.0.1",
            "2.1.0", "2.1.1", "2.2.0", "2.2.1", "2.3.0"]
NO_SDIST = {"2.1.0", "2.1.1"}
FIRST_BAD = "2.0.1"


def sdist_bytes(name: str, version: str) -> bytes:
    """A real .tar.gz laid out as an sdist: one top folder NAME-VERSION/."""
    bad = [int(x) for x in version.split(".")[:3] if x.isdigit()] >= [2, 0, 1]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for fname, text in (("state", "bad\n" if bad else "good\n"), ("VERSION", version + "\n")):
            data = text.encode()
            info = tarfile.TarInfo(f"{name}-{version}/{fname}")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


class Index(BaseHTTPRequestHandler):
    files: dict[str, bytes] = {}
    seen: list[str] = []
    base = ""

    @classmethod
    def document(cls) -> dict:
        releases = {}
        for i, v in enumerate(VERSIONS):
            wheel = {"filename": f"demo-{v}-py3-none-any.whl", "packagetype": "bdist_wheel",
                     "upload_time": f"2026-01-{i + 1:02d}T00:00:00", "url": f"{cls.base}/files/none.whl",
                     "digests": {"sha256": "0" * 64}}
            entries = [wheel]
            if v not in NO_SDIST:
                fn = f"demo-{v}.tar.gz"
                cls.files[fn] = sdist_bytes("demo", v)
                entries.append({"filename": fn, "packagetype": "sdist", "upload_time": wheel["upload_time"],
                                "url": f"{cls.base}/files/{fn}",
                                "digests": {"sha256": hashlib.sha256(cls.files[fn]).hexdigest()}})
            releases[v] = entries
        return {"info": {"name": "demo", "version": VERSIONS[-1]}, "releases": releases}

    def do_GET(self):  # noqa: N802 - http.server's name
        Index.seen.append(self.path)
        if self.path == "/pypi/demo/json":
            body, kind = json.dumps(self.document()).encode(), "application/json"
        elif self.path.startswith("/files/") and self.path[7:] in Index.files:
            body, kind = Index.files[self.path[7:]], "application/octet-stream"
        else:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def index(monkeypatch):
    monkeypatch.setattr(hh, "ALLOW_LOOPBACK_HTTP", True)  # the index of this test is plain http on 127.0.0.1
    server = ThreadingHTTPServer(("127.0.0.1", 0), Index)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    Index.base = f"http://127.0.0.1:{server.server_address[1]}"
    Index.seen = []
    yield server, Index.base + "/pypi/{name}/json"
    server.shutdown()
    server.server_close()


CHECK = ["sh", "-c", "grep -q bad state && exit 1; exit 0"]


def test_release_points_order_skip_prereleases_and_mark_missing_sdists(index, tmp_path):
    _server, url = index
    h = ReleaseHistory("demo", "1.0.1", "2.2.1", index=url, cache=tmp_path / "cache")
    points = h.points()
    ids = [p.id for p in points]
    assert ids == ["1.0.1", "1.1.0", "1.1.1", "1.1.2", "1.2.0", "2.0.0", "2.0.1", "2.1.0", "2.1.1", "2.2.0", "2.2.1"]
    assert points[7].title == "demo 2.1.0 (no sdist on the index)" and points[6].date == "2026-01-09"
    # the newest patch of each minor comes first
    assert {ids[i] for i in h.preferred(points)} == {"1.0.1", "1.1.2", "1.2.0", "2.0.1", "2.1.1", "2.2.1"}
    assert ReleaseHistory("demo", "1.0.1", "2.2.1", index=url, cache=tmp_path, minor_first=False).preferred(points) == set()


def test_bisect_over_releases_names_the_first_bad_release_then_runs_offline(index, tmp_path, monkeypatch, capsys):
    server, url = index
    monkeypatch.setattr(history_mod, "SDIST_CACHE", tmp_path / "cache")
    rc = cli.main(["bisect", "pypi:demo", "--good", "1.0.0", "--bad", "2.3.0", "--index", url,
                   "--out", str(tmp_path / "out"), "--", *CHECK])
    assert rc == 0
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["first_bad"]["id"] == FIRST_BAD and result["last_good"]["id"] == "2.0.0"
    assert "First bad release: **2.0.1** demo 2.0.1" in capsys.readouterr().out
    judged = [s["id"] for s in result["steps"]]
    assert "2.0.0rc1" not in judged
    # the coarse pass: after the two ends, only the newest patch of a minor until the range is one minor
    assert judged[2] in {"1.1.2", "1.2.0", "2.0.1", "2.1.1", "2.2.1"}
    for s in result["steps"]:
        if s["id"] in NO_SDIST:
            assert s["verdict"] == "skip" and "has no sdist on the index" in s["reason"]
    assert sorted(p.name for p in (tmp_path / "cache").glob("*.tar.gz")) == \
        sorted(f"demo-{v}.tar.gz" for v in judged if v not in NO_SDIST)
    # offline: the index is gone; the release list and the sdists come from the cache
    server.shutdown()
    server.server_close()
    rc = cli.main(["bisect", "pypi:demo", "--good", "1.0.0", "--bad", "2.3.0", "--index", url,
                   "--all-releases", "--out", str(tmp_path / "offline"), "--", *CHECK])
    again = json.loads((tmp_path / "offline" / "result.json").read_text())
    assert rc == 0 and again["first_bad"]["id"] == FIRST_BAD


def test_a_tampered_cached_sdist_is_a_skip_not_a_verdict(index, tmp_path):
    _server, url = index
    cache = tmp_path / "cache"
    h = ReleaseHistory("demo", "1.0.0", "2.3.0", index=url, cache=cache)
    point = next(p for p in h.points() if p.id == "1.1.0")
    h.unpack(point, tmp_path / "tree")
    assert (tmp_path / "tree" / "VERSION").read_text() == "1.1.0\n"
    (cache / "demo-1.1.0.tar.gz").write_bytes(sdist_bytes("demo", "2.3.0"))
    with pytest.raises(history_mod.Unavailable, match="sha256 differs from the index's"):
        h.unpack(point, tmp_path / "tree2")


def test_unknown_endpoints_are_bad_input(index, tmp_path, capsys):
    _server, url = index
    rc = cli.main(["bisect", "pypi:demo", "--good", "1.0.0", "--bad", "9.9.9", "--index", url,
                   "--out", str(tmp_path / "out"), "--", *CHECK])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 2 and "--bad 9.9.9: no such release of demo on the index" in err
    rc = cli.main(["bisect", "pypi:demo", "--good", "2.0.0", "--bad", "1.0.0", "--index", url, "--", *CHECK])
    assert rc == 2 and "is not older than --bad" in " ".join(capsys.readouterr().err.split())


def test_an_index_that_cannot_answer_is_named(index, tmp_path, monkeypatch, capsys):
    _server, url = index
    monkeypatch.setattr(history_mod, "SDIST_CACHE", tmp_path / "cache")
    rc = cli.main(["bisect", "pypi:other", "--good", "1.0.0", "--bad", "2.0.0", "--index", url, "--", *CHECK])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 3 and "cannot read http://127.0.0.1" in err and "/pypi/other/json" in err
    (tmp_path / "cache").mkdir()
    (tmp_path / "cache" / "other.releases.json").write_text("{broken")
    rc = cli.main(["bisect", "pypi:other", "--good", "1.0.0", "--bad", "2.0.0", "--index", url, "--", *CHECK])
    err = " ".join(capsys.readouterr().err.split())
    assert rc == 2 and "other.releases.json: not valid JSON" in err and "Traceback" not in err
