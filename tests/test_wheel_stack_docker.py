"""A wheel stack built by the real engine: local base pinned by ID, wheels checked, patch applied."""

from __future__ import annotations

import subprocess
import uuid
from pathlib import Path

import pytest
from conftest import skip_or_fail_under_ci

from harness import bundle
from harness.engine import connect
from harness.image.builder import build_stacks
from harness.image.stackbuild import resolve
from harness.matrix.load import load_matrix
from tests.test_wheel_stack import GUARD, PATCH, spec_file, wheel, wheel_matrix  # noqa: F401 (fixture helpers)

pytestmark = pytest.mark.docker
BASE = "harness-test/debian-python:bookworm"  # tools/base-images.sh; Python without pip


def test_wheel_stack_builds_on_a_local_base(tmp_path):
    engine = connect()
    if engine.image_id(BASE) is None:
        skip_or_fail_under_ci(f"{BASE} missing: run tools/base-images.sh")
    tag = f"harness-test/wbase:{uuid.uuid4().hex[:8]}"  # a local tag of our own, removed at the end
    subprocess.run(["docker", "tag", BASE, tag], check=True)
    dl = tmp_path / "dl"
    dl.mkdir()
    wheel(dl, "vllm", "0.25.1", {"vllm/__init__.py": "", "vllm/vllm_flash_attn/__init__.py": "\n".join(GUARD) + "\n",
                                 "vllm/vllm_flash_attn/_vllm_fa2_C.abi3.so": "x" * 5000})
    wheel(dl, "tinydep", "1.0", {"tinydep/__init__.py": "X = 1\n"})
    manifest = bundle.make(spec_file(tmp_path), tmp_path / "b", downloaded=dl)
    bundle.unpack(tmp_path / "b", tmp_path / "wh")
    sha = next(w.sha256 for w in manifest.lock.wheels if w.name == "vllm")
    text = wheel_matrix(tmp_path, tmp_path / "wh", sha).read_text()
    repo, _, t = tag.partition(":")
    text = (text.replace('repository = "base", tag = "local"', f'repository = "{repo}", tag = "{t}"')
            .replace('python = "/opt/venv/bin/python3"', 'python = "python3"').replace('torch = { version = "2.11.0" }', ""))
    (tmp_path / "m.toml").write_text(text)
    m = load_matrix(tmp_path / "m.toml")
    ref = None
    try:
        out = build_stacks(resolve(m, ["w"], engine=engine), engine=engine, log_dir=tmp_path / "logs")["w"]
        ref = out.image_ref
        assert out.status == "built", out.log_tail
        base_id = engine.image_id(tag)
        assert out.labels["harness.base-image-id"] == base_id
        assert out.labels["harness.stack-kind"] == "wheels"
        log = Path(out.log_path).read_text()
        assert f"FROM {base_id}" in log or "FROM ${BASE_IMAGE}" in log
        assert f"wheel vllm 0.25.1 sha256 {sha} (re-packed: too large)" in log
        assert "patched vllm/vllm_flash_attn/__init__.py" in log and "installed vllm 0.25.1" in log
        site = (engine.export_path(ref, "/opt/build/site-packages.txt", tmp_path / "x",
                                   {"harness.role": "audit"}) / "site-packages.txt").read_text().strip()
        dest = engine.export_path(ref, f"{site}/vllm/vllm_flash_attn/__init__.py", tmp_path / "y",
                                  {"harness.role": "audit"})
        assert "if False and not (FA2_AVAILABLE or FA3_AVAILABLE):" in (dest / "__init__.py").read_text()
        # built again: same tag, reused
        again = build_stacks(resolve(m, ["w"], engine=engine), engine=engine, log_dir=tmp_path / "logs")["w"]
        assert again.status == "reused" and again.image_ref == ref
    finally:
        if ref:
            engine.remove_image(ref)
        subprocess.run(["docker", "rmi", tag], capture_output=True)
    assert not engine.containers({"harness.role": "audit"})
