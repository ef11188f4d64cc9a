"""The packaging probe of a default stack, for real, in Docker: matrix/generic.toml's vllm-0330
(vLLM 0.33.0 and FlashInfer 0.7.2.post1 sdists, torch 2.14.0) on the stand-in CUDA 13 base of
tools/cuda13-base.sh for this host's platform (nvidia/cuda cannot be pulled here; torch from
PyPI instead of the cu130 index; Debian's Python 3.11 instead of Ubuntu's 3.12).

What it proves: the template's base stage installs the build requirements read from the sdists,
FlashInfer's sdist installs, and the template's own vLLM install step (setup.py, setuptools-scm,
the optional Rust front end, the wheel, pip resolving vLLM's runtime requirements for torch
2.14.0 on this CPU) ends with vLLM 0.33.0 installed and `pip check` clean. What it does not: the
kernels (stand-ins, nothing compiled; the units probe and a full build do that).

Downloads several GB from PyPI inside the build (torch and its CUDA libraries, vLLM's runtime
requirements): it runs where the base image is (`make test-toolchain` makes it, CI does).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from support.builds import one

from harness import platforms
from harness.image.probe import probe_stack
from harness.matrix.load import load_matrix

pytestmark = [pytest.mark.docker, pytest.mark.network, pytest.mark.slow]

ROOT = Path(__file__).resolve().parent.parent
PLATFORM = platforms.host()
BASE = f"harness-test/cuda13:bookworm-{PLATFORM.short}"


@pytest.fixture(scope="module")
def engine():
    from harness.engine import connect

    eng = connect(timeout=30)
    if eng.image_id(BASE) is None:
        why = (f"{BASE} is missing: `make test-toolchain` builds it (tools/cuda13-base.sh) and runs this test; "
               "HARNESS_TOOLCHAIN=1 makes `make test` build it too")
        if os.environ.get("HARNESS_REQUIRE_TOOLCHAIN") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return eng


def test_the_default_stack_packages_and_installs_on_this_platform(engine, tmp_path, pinned_sources):
    pinned_sources.tree("vllm", "0.33.0")  # the stack's two sources, read from the cache
    pinned_sources.tree("flashinfer-python", "0.7.2.post1")
    sys.path.insert(0, str(ROOT / "tools"))
    try:
        import defaults_probe
    finally:
        sys.path.remove(str(ROOT / "tools"))
    matrix = load_matrix(defaults_probe.variant(ROOT / "matrix" / "generic.toml", PLATFORM.short))
    o = probe_stack(one(matrix, "vllm-0330", engine=engine, platform=PLATFORM), engine=engine, log_dir=tmp_path, parts=("packaging",))
    p = o.packaging
    assert p is not None
    try:
        log = Path(p.log_path).read_text(errors="replace") if p.log_path else ""
        assert o.status == "pass", (p.reason, log[-4000:])
        assert (p.vllm, p.flashinfer) == ("0.33.0", "0.7.2.post1")
        assert p.torch and p.torch.startswith("2.14.0") and p.machine == PLATFORM.machine
        assert p.installed_line and "vllm-0.33.0" in p.installed_line
        # the build requirements the hand-kept list lacked, met from the sdists' own lists (checked
        # again in the finished image: the base stage itself may come from the engine's cache)
        met = "\n".join(p.build_requirements)
        assert "build requirement setuptools-rust>=1.9.0: " in met and "build requirement setuptools<81.0.0" in met, met
        # no Rust toolchain in the base: the optional front end is skipped, and the record says so
        assert p.rust_frontend and p.rust_frontend.startswith("not built")
        assert "vllm._C" in p.stand_ins and "vllm.vllm_flash_attn._vllm_fa2_C" in p.stand_ins
        assert "harness: build requirement" not in met
    finally:
        engine.remove_image(p.image_ref)
