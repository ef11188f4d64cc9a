"""Every file reader, handed every kind of hostile file: matrix, lock, log, wheel, bundle.

The same kinds go to each reader (a FIFO, /dev/zero or /dev/urandom behind a symlink, a symlink
loop, a dangling link, a link to a file outside the inputs, a folder, a 5 GiB sparse file,
50,000 levels of nesting, random bytes): the command ends with exit 0-3 and one message, never
a traceback, a hang or a read of the whole device; nothing outside the inputs is touched and no
secret is printed. Bundles get damaged manifests, part names that leave the folder, truncated
and bomb archives; wheels get damaged deflate streams and 100,000 empty members.
"""

from __future__ import annotations

import functools
import hashlib
import io
import json
import lzma
import random
import tarfile
import tempfile
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.hostile import KINDS, SECRET, check_after, make_sandbox, run_cli

FUZZ = settings(max_examples=50, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
CUBIN = Path(__file__).parent / "fixtures" / "cubins" / "mixed.so"
MATRIX = """
[matrix]
name = "h"
hardware = "gb10"
patches_dir = "patches"
[hardware.gb10]
cc = "12.1"
bandwidth_gbs = 273
memory_gib = 128
[stacks.img]
image = "vllm/vllm-openai:v0.33.0"
[models.m]
checkpoint = "org/model"
quantization = "fp8"
active_params_b = 3.3
bytes_per_param = 1.0
[configs.auto]
"""


def _one(home, victim, build_argv) -> tuple[int, str]:
    with tempfile.TemporaryDirectory(dir=home) as tmp:
        sb = make_sandbox(Path(tmp), victim)
        argv = build_argv(sb)
        before = sb.snapshot()
        rc, text = run_cli(argv)
        check_after(sb, before, victim, argv, rc, text)
        return rc, text


READERS = ["plan", "fingerprint", "audit", "audit-whl", "audit-dir", "lock", "bundle-spec", "patch"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("reader", READERS)
def test_every_reader_every_kind(home, victim, kind, reader):
    def argv(sb):
        w = sb.work
        if reader == "plan":
            return ["plan", "-m", sb.plant(w / "m.toml", kind, MATRIX)]
        if reader == "fingerprint":
            return ["fingerprint", sb.plant(w / "vllm.log", kind, "INFO vLLM API server version 0.33.0\n")]
        if reader == "audit":
            return ["audit", sb.plant(w / "lib.so", kind, "x")]
        if reader == "audit-whl":
            return ["audit", sb.plant(w / "pkg-1.0-py3-none-any.whl", kind, "x")]
        if reader == "audit-dir":  # a folder walk meets the same kinds as members of a tree
            sb.plant(w / "tree" / "pkg-1.0-py3-none-any.whl", kind, "x")
            sb.plant(w / "tree" / "sub" / "lib.so", kind, "x")
            return ["audit", w / "tree"]
        if reader == "lock":
            (w / ".git").mkdir(exist_ok=True)
            (w / "m.toml").write_text(MATRIX.replace('[stacks.img]\nimage = "vllm/vllm-openai:v0.33.0"',
                                                     '[stacks.img]\nimage = "vllm/vllm-openai:v0.33.0"'))
            sb.plant(w / "m.lock", kind, "[lock]\nformat = 1\n")
            return ["build", "--dry-run", "-m", w / "m.toml"]
        if reader == "bundle-spec":
            (w / "dl").mkdir(exist_ok=True)
            return ["bundle", "make", sb.plant(w / "spec.toml", kind, 'name = "b"\nrequirements = ["x==1"]\n'),
                    "--out", w / "out", "--downloaded", w / "dl"]
        (w / ".git").mkdir(exist_ok=True)
        sb.plant(w / "patches" / "a.patch", kind, "--- a/x.py\n+++ b/x.py\n")
        text = MATRIX.replace('[stacks.img]\nimage = "vllm/vllm-openai:v0.33.0"',
                              '[stacks.s]\ntorch_cuda_arch_list = "12.1a"\n'
                              'base_image = { repository = "nvidia/cuda", tag = "13.0.1-devel-ubuntu24.04" }\n'
                              'torch = { version = "2.14.0" }\nvllm = { pypi = "0.33.0", patches = ["a.patch"] }')
        (w / "m.toml").write_text(text)
        return ["build", "--dry-run", "--no-preflight", "-m", w / "m.toml"]

    rc, text = _one(home, victim, argv)
    refused = {"fifo", "dev_zero", "dev_urandom", "link_loop", "sparse_huge"}
    if reader in ("plan", "bundle-spec"):
        refused |= {"deep_json", "deep_toml", "binary", "folder", "empty"}
    if reader == "audit-dir":
        refused = {"fifo"}  # links are audited under their targets' own names, devices never planned
    if reader != "lock":  # a lock is optional: a build --dry-run without one is fine
        assert rc != 0 or kind not in refused, f"{reader} accepted a {kind}: {text[-500:]}"


def test_lock_reader_refuses_every_hostile_kind(home, victim):
    from harness.errors import HarnessError
    from harness.lock import read_lock

    with tempfile.TemporaryDirectory(dir=home) as tmp:
        sb = make_sandbox(Path(tmp), victim)
        for kind in KINDS:
            path = sb.plant(sb.work / f"{kind}.lock", kind, "[lock]\nformat = 1\n")
            try:
                read_lock(path)
            except HarnessError as exc:
                assert exc.exit_code == 2 and str(path) in str(exc), (kind, str(exc))
            else:
                assert kind in ("link_dangling",), f"read_lock accepted a {kind}"


# --- bundles ------------------------------------------------------------------------------------


def _tar_xz(members: list[tuple[str, bytes, bytes]], *, preset: int = 0) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as t:
        for name, data, kind in members:
            info = tarfile.TarInfo(name)
            if kind == b"link":
                info.type, info.linkname = tarfile.SYMTYPE, data.decode()
                t.addfile(info)
            else:
                info.size = len(data)
                t.addfile(info, io.BytesIO(data))
    return lzma.compress(buf.getvalue(), preset=preset)


@functools.cache
def _bomb() -> bytes:
    """200 MiB of zeros as one wheelhouse member: about 30 KB of xz."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as t:
        info = tarfile.TarInfo("x-1.0-py3-none-any.whl")
        info.size = 200 << 20
        t.addfile(info, io.BytesIO(bytes(info.size)))
    return lzma.compress(raw.getvalue(), preset=0)


WHEEL = "x-1.0-py3-none-any.whl"
ARCHIVES = {
    "good": lambda: _tar_xz([(WHEEL, b"PK-not-really", b""), ("wheels.lock", b"{}", b"")]),
    "traversal": lambda: _tar_xz([("../../canary/victim", b"owned", b"")]),
    "absolute": lambda: _tar_xz([("/tmp/harness-hostile-abs", b"owned", b"")]),
    "symlink": lambda: _tar_xz([(WHEEL, b"/etc/passwd", b"link")]),
    "bomb": _bomb,
    "truncated": lambda: _tar_xz([(WHEEL, random.Random(1).randbytes(5000), b"")])[:-200],
    "garbage": lambda: random.Random(2).randbytes(3000),
    "empty": lambda: b"",
}
PART_NAMES = ["part_00", "/etc/passwd", "../canary/victim", "part_00\n", "", "part_0", "a/../part_00",
              "link_part"]


@FUZZ
@given(archive=st.sampled_from(sorted(ARCHIVES)), part=st.sampled_from(PART_NAMES),
       manifest_edit=st.sampled_from([None, "no-parts", "parts-not-list", "bad-sha", "lock-str", "wheel-file-abs",
                                      "wheel-file-up", "deep", "not-object", "bytes-negative", "sha-newline"]),
       dest_kind=st.sampled_from(["new", "link_elsewhere", "has_link"]))
def test_hostile_bundle_install(home, victim, archive, part, manifest_edit, dest_kind):
    def argv(sb):
        bundle = sb.work / "bundle"
        bundle.mkdir()
        data = ARCHIVES[archive]()
        if part == "link_part":
            (bundle / "part_00").symlink_to(sb.canary / "secret.txt")
            name = "part_00"
        else:
            name = part
            if name and "/" not in name and "\n" not in name:
                (bundle / name).write_bytes(data)
        wheels = [{"name": "x", "version": "1.0", "file": WHEEL, "sha256": hashlib.sha256(b"PK-not-really").hexdigest()}]
        manifest = {"bundle": "b", "archive_sha256": hashlib.sha256(data).hexdigest(), "archive_bytes": len(data),
                    "parts": [{"file": name, "bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}],
                    "lock": {"wheels": wheels}}
        edits = {
            "no-parts": lambda m: m.pop("parts"),
            "parts-not-list": lambda m: m.update(parts=7),
            "bad-sha": lambda m: m["parts"][0].update(sha256="0" * 64),
            "lock-str": lambda m: m.update(lock="x"),
            "wheel-file-abs": lambda m: wheels[0].update(file="/etc/passwd"),
            "wheel-file-up": lambda m: wheels[0].update(file="../../canary/victim"),
            "not-object": lambda m: m.clear(),
            "bytes-negative": lambda m: m.update(archive_bytes=-1),
            "sha-newline": lambda m: m.update(archive_sha256=m["archive_sha256"] + "\n"),
        }
        if manifest_edit in edits:
            edits[manifest_edit](manifest)
        text = json.dumps(manifest) if manifest_edit != "not-object" else "[1, 2]"
        if manifest_edit == "deep":
            text = "[" * 30_000 + "]" * 30_000
        (bundle / "bundle.json").write_text(text)
        dest = sb.work / "dest"
        if dest_kind == "link_elsewhere":  # a --dest the user gave as a link is theirs to give
            (sb.root / "elsewhere").mkdir()
            dest.symlink_to(sb.root / "elsewhere")
        elif dest_kind == "has_link":
            dest.mkdir()
            (dest / WHEEL).symlink_to(sb.canary / "victim")
            (dest / "wheels.lock").symlink_to(sb.canary / "victim")
        return ["bundle", "install", bundle, "--dest", dest]

    rc, text = _one(home, victim, argv)
    if archive != "good":
        assert rc != 0, text[-800:]
    assert not Path("/tmp/harness-hostile-abs").exists()


def test_xz_bomb_stops_at_the_bound(home, victim):
    def argv(sb):
        bundle = sb.work / "bundle"
        bundle.mkdir()
        data = _bomb()
        (bundle / "part_00").write_bytes(data)
        sha = hashlib.sha256(data).hexdigest()
        (bundle / "bundle.json").write_text(json.dumps({
            "bundle": "b", "archive_sha256": sha, "archive_bytes": len(data),
            "parts": [{"file": "part_00", "bytes": len(data), "sha256": sha}],
            "lock": {"wheels": [{"name": "x", "version": "1.0", "file": WHEEL, "sha256": "0" * 64}]}}))
        return ["bundle", "install", bundle, "--dest", sb.work / "dest"]

    rc, text = _one(home, victim, argv)
    assert rc == 2 and "unpacks to more than" in text, text


def test_bundle_make_never_writes_outside_out(home, victim):
    def argv(sb):
        (sb.work / "dl").mkdir()
        spec = sb.work / "spec.toml"
        spec.write_text('name = "../../canary/victim"\nrequirements = ["x==1"]\n')
        return ["bundle", "make", spec, "--out", sb.work / "out", "--downloaded", sb.work / "dl"]

    rc, text = _one(home, victim, argv)
    assert rc == 2 and "name" in text, text


# --- wheels for the audit -----------------------------------------------------------------------


@functools.cache
def _wheel() -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("pkg/_C.so", CUBIN.read_bytes() * 3)
        z.writestr("pkg-1.0.dist-info/RECORD", "")
    return buf.getvalue()


@FUZZ
@given(offset=st.integers(min_value=0, max_value=10**6), flips=st.binary(min_size=1, max_size=16),
       cut=st.one_of(st.none(), st.integers(min_value=1, max_value=10**6)))
def test_audit_damaged_wheel_is_a_finding_never_a_crash(home, victim, offset, flips, cut):
    def argv(sb):
        data = bytearray(_wheel())
        at = 30 + offset % (len(data) - 60)
        data[at:at + len(flips)] = flips
        if cut is not None:
            data = data[: max(1, len(data) - cut % len(data))]
        path = sb.work / "pkg-1.0-py3-none-any.whl"
        path.write_bytes(bytes(data))
        return ["audit", path, "--jobs", "1"]

    _one(home, victim, argv)


def test_audit_of_a_wheel_of_100000_empty_libraries_is_incomplete(home, victim):
    def argv(sb):
        path = sb.work / "many-1.0-py3-none-any.whl"
        with zipfile.ZipFile(path, "w") as z:
            for i in range(100_000):
                z.writestr(f"m/lib{i}.so", b"")
        return ["audit", path]

    rc, text = _one(home, victim, argv)
    assert rc == 2 and "many-1.0-py3-none-any.whl" in text, text


# --- URLs ---------------------------------------------------------------------------------------

URL_PARTS = st.sampled_from(["http://", "https://", "ftp://", "http:/", "", "unix://", "http://[::1", "http://[::1]",
                             "http://127.0.0.1", f"http://u:{SECRET}@127.0.0.1", ":0", ":1", ":99999", ":-1", "/v1",
                             f"?access_token={SECRET}", "\n", " ", "\x00", "#", "%", "@", "[", "]"])


@FUZZ
@given(parts=st.lists(URL_PARTS, min_size=1, max_size=5))
def test_bench_url_never_crashes_nor_leaks(home, victim, parts):
    url = "".join(parts)
    if "127.0.0.1" in url and ":1" not in url:
        url = url.replace("127.0.0.1", "127.0.0.1:1", 1)  # nothing listens there: refused at once
    _one(home, victim, lambda sb: ["bench", "--url", url, "--model", "m", "--timeout", "2", "--no-warmup",
                                   "--no-prefill", "--repeats", "1", "--concurrency", "1"])


def test_add_pr_against_a_silent_server_gives_up_after_two_tries(home, victim, monkeypatch):
    """A server that accepts the connection and never answers: one clear error (exit 3) after
    the bounded answer timeout and one more try, never minutes of retries."""
    import socket
    import threading

    from harness import http as harness_http
    from harness.image import addpr

    monkeypatch.setattr(harness_http, "ALLOW_LOOPBACK_HTTP", True)
    monkeypatch.setattr(addpr, "ANSWER_TIMEOUT_S", 0.5)
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    accepted: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                conn, _ = server.accept()
            except OSError:
                return
            accepted.append(conn)  # held open, never answered

    threading.Thread(target=accept, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{server.getsockname()[1]}"
        rc, text = _one(home, victim, lambda sb: ["patches", "add-pr", "vllm", "1", "--base-url", base,
                                                  "--patches-dir", sb.work / "patches"])
    finally:
        server.close()
        for conn in accepted:
            conn.close()
    assert rc == 3 and "gave up after 2 attempts" in text, text
    assert len(accepted) == 2


LOG_LINES = st.sampled_from([
    "INFO vLLM API server version 0.33.0", '{"message": "x", "a": ' + "[" * 20_000 + "]" * 20_000 + "}",
    "(APIServer pid=1) INFO non-default args: {'speculative_config': '" + "[" * 20_000 + "'}",
    "(APIServer pid=1) INFO non-default args: {'a': " + "(" * 5_000 + ")" * 5_000 + "}",
    '{"log": "' + "1" * 5000 + '"}', "{" + "1" * 5000 + "}", "\x1b[31m\x00\xff", "KV cache size: 9" * 500 + " tokens",
    f"export DB_PASS={SECRET}", f"--api-key {SECRET}", "Traceback (most recent call last):", "x" * 100_000,
])


@FUZZ
@given(lines=st.lists(st.one_of(LOG_LINES, st.text(max_size=80)), min_size=1, max_size=8))
def test_fingerprint_of_a_hostile_log(home, victim, lines):
    def argv(sb):
        path = sb.work / "vllm.log"
        path.write_text("\n".join(lines) + "\n", errors="surrogatepass")
        return ["fingerprint", path]

    _one(home, victim, argv)
