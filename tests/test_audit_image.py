"""`harness audit IMAGE`: the image's packages are copied out and audited like a directory."""

from __future__ import annotations

import io
import tarfile
import uuid
from pathlib import Path

import pytest

from harness.audit import audit_path
from harness.audit.cli import audit_image
from harness.audit.report import DEFAULT_TARGETS
from harness.engine import connect
from harness.errors import EngineError

pytestmark = pytest.mark.docker

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


def test_missing_image_is_a_clear_error():
    with pytest.raises(EngineError, match="no image"):
        audit_image("harness-test/does-not-exist:never", list(DEFAULT_TARGETS), sass_check=False)
