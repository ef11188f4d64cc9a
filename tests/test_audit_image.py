"""`harness audit IMAGE`: the image's packages are copied out and audited like a directory."""

from __future__ import annotations

import io
import tarfile
import uuid
from pathlib import Path

import pytest

from harness.audit.report import DEFAULT_TARGETS, audit_path
from harness.cli.audit import audit_image
from harness.engine import connect
from harness.errors import EngineError

CUBINS = Path(__file__).resolve().parent / "fixtures" / "cubins"


def _image_with(so: Path, inside: str) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in (("Dockerfile", f"FROM harness-test/busybox:latest\nCOPY lib.so {inside}\n".encode()),
                           ("lib.so", so.read_bytes())):
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    tag = f"harness-test/audit:{uuid.uuid4().hex[:8]}"
    connect().build(buf.getvalue(), tag, labels={"harness.role": "test"})
    return tag


@pytest.mark.docker
def test_image_audit_equals_the_file_audit():
    so = sorted(CUBINS.glob("*.so"))[0]
    tag = _image_with(so, "/usr/local/lib/python3.12/site-packages/vllm/_C.abi3.so")
    engine = connect()
    try:
        from_image = audit_image(tag, list(DEFAULT_TARGETS), sass_check=False)
        from_file = audit_path(so, list(DEFAULT_TARGETS), sass_check=False)
        assert from_image.totals() == from_file.totals() and from_file.totals()
        assert [v.status for v in from_image.verdicts] == [v.status for v in from_file.verdicts]
        assert engine.containers({"harness.role": "audit-export"}) == []
    finally:
        engine.remove_image(tag)


@pytest.mark.docker
def test_missing_image_is_a_clear_error():
    with pytest.raises(EngineError, match="no image"):
        audit_image("harness-test/does-not-exist:never", list(DEFAULT_TARGETS), sass_check=False)


@pytest.mark.parametrize(("target", "image"), [
    ("vllm-bw:spark-121a-0123456789ab", True), ("nvidia/cuda:13.0.1-devel-ubuntu24.04", True),
    ("/nonexistent/site-packages", False), ("./build/lib", False), ("vllm-0.25.1.whl", False),
])
def test_what_counts_as_an_image(target, image):
    from harness.cli.audit import _looks_like_image

    assert _looks_like_image(target) is image


def _image_running(script: str) -> str:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        data = f"FROM harness-test/busybox:latest\nRUN {script}\n".encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    tag = f"harness-test/audit:{uuid.uuid4().hex[:8]}"
    connect().build(buf.getvalue(), tag, labels={"harness.role": "test"})
    return tag


SITE = "/usr/local/lib/python3.12/site-packages"


@pytest.mark.docker
@pytest.mark.parametrize("script", [
    "mkdir -p /opt/build && ln -s /etc/passwd /opt/build/site-packages.txt",
    "mkdir -p /opt/build && ln -s ../../etc/passwd /opt/build/site-packages.txt",
    "mkdir -p /opt/build && mkfifo /opt/build/site-packages.txt",
    f"mkdir -p /opt/build {SITE} && echo {SITE} > /opt/build/site-packages.txt && ln -s / {SITE}/vllm",
    f"mkdir -p /opt/build {SITE}/vllm && echo {SITE} > /opt/build/site-packages.txt && ln -s ../../../../../etc "
    f"{SITE}/vllm/etc && mkfifo {SITE}/vllm/pipe",
])
def test_links_fifos_and_devices_inside_an_image_are_never_followed(script):
    """The image is data: /opt/build/site-packages.txt or the vllm folder being a link to /,
    /etc/passwd or ../../etc, or a FIFO, is refused by name (exit 2) or left out, never read
    or walked."""
    from support.hostile import run_cli

    tag = _image_running(script)
    try:
        rc, text = run_cli(["audit", tag, "--image"])
        assert rc in (0, 1, 2, 3) and "Traceback" not in text, text[-2000:]
        assert "root:x:0:0" not in text
    finally:
        connect().remove_image(tag)
