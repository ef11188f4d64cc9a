"""The real source-build template on a real engine, as far as a machine without a GPU reaches:
`harness build --probe` of an offline vLLM 0.25.1 stack (PyPI sdist + patches 0001, 0002 and
flash-attn-optional; the pinned CUTLASS archive, handed over as an air-gapped host takes it),
CMake configure of the stock and the patched source with FETCHCONTENT_FULLY_DISCONNECTED, one
real translation unit (moe_data.cu, for 9.0a and 12.1a) compiled by nvcc 13.0, and its audit.

The probe runs twice, the second time with another job count (so the engine's layer cache cannot
answer for the probe step and it really runs): through the compile cache it compiles nothing.

Base: harness-test/toolchain:cu130 from tools/toolchain-base.sh (Debian + this host's CUDA
toolkit + torch 2.11.0 and its CUDA libraries from PyPI, ccache from Debian). Not reached here: the other 117 steps
of the build (hours on 2 cores), the FlashInfer stage (the probe skips it), serving (no GPU).
"""

from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest
from support.builds import one

from harness.image import offline
from harness.image.probe import Unit, probe_stack
from harness.matrix.load import load_matrix

pytestmark = [pytest.mark.docker, pytest.mark.nvcc, pytest.mark.slow, pytest.mark.network]

ROOT = Path(__file__).resolve().parent.parent
BASE = "harness-test/toolchain:cu130"
MOE_DATA = Unit(family="CUTLASS MoE data", source="csrc/libtorch_stable/quantization/w8a8/cutlass/moe/moe_data.cu",
                decision="Building moe_data for archs:")


@pytest.fixture(scope="module")
def engine():
    from harness.engine import connect

    eng = connect(timeout=30)
    if eng.image_id(BASE) is None:
        # 2.6 GB of wheels and ~6 min on 2 cores: `make test` does not build it unless asked
        why = (f"{BASE} is missing: `make test-toolchain` builds it (2.6 GB of wheels, an 8.6 GB image) "
               "and runs this test; HARNESS_TOOLCHAIN=1 makes `make test` build it too")
        if os.environ.get("HARNESS_REQUIRE_TOOLCHAIN") == "1":
            pytest.fail(why)
        pytest.skip(why)
    return eng


def test_probe_of_the_real_template_configures_compiles_and_audits(engine, tmp_path, monkeypatch, pinned_sources):
    pinned_sources.tree("vllm", "0.25.1")  # the stack's two sources, read from the cache
    pinned_sources.tree("flashinfer-python", "0.6.13")
    # the pinned CUTLASS tree arrives as an archive file, checked by content on entering the cache
    monkeypatch.setattr(offline, "OFFLINE", tmp_path / "cache")
    with socket.socket() as s:  # a compile cache of this test's own
        s.bind(("127.0.0.1", 0))
        monkeypatch.setenv("HARNESS_COMPILE_CACHE_PORT", str(s.getsockname()[1]))
    monkeypatch.setenv("HARNESS_COMPILE_CACHE_DIR", str(tmp_path / "compile-cache"))
    pin = offline.load_table("0.25.1").pins[0]
    offline.fetch(pin, from_dir=ROOT / "tests" / "fixtures" / "offline", cache=offline.OFFLINE)
    text = (ROOT / "matrix" / "h200-source.toml").read_text()
    text = (text.replace('{ repository = "h200-root", tag = "local", local = true }',
                         '{ repository = "harness-test/toolchain", tag = "cu130", local = true }')
            .replace('deps_wheelhouse = "/tmp/deps-wheelhouse"', "").replace("max_jobs = 16", "max_jobs = 2")
            .replace('name = "h200-source"', f'name = "probe-test-{os.getpid()}"'))
    path = ROOT / "matrix" / f".test-probe-{os.getpid()}.toml"  # patches resolve from matrix/
    path.write_text(text)
    refs = []
    try:
        # the units probe (the packaging probe has its own test: test_packaging_probe_docker.py; this
        # stack's runtime wheelhouse is left out here, so its `pip check` could not pass)
        o = probe_stack(one(load_matrix(path), "src-0251", engine=engine), engine=engine, log_dir=tmp_path / "logs",
                        units=(MOE_DATA,), parts=("units",))
        refs.append(o.image_ref)
        log = Path(o.log_path).read_text(errors="replace") if o.log_path else ""
        assert o.status == "pass", (o.reason, log[-3000:])
        (row,) = o.rows
        assert (row.stock, row.patched) == ("9.0a;12.0f", "9.0a;12.1a")  # patch 0001 at work
        assert row.archs == "sm_121a=1,sm_90a=1", row.archs
        assert row.verdicts and all(": pass:" in v for v in row.verdicts), row.verdicts
        assert "harness cut: ON" in log and "Building SM12x NVFP4 for archs: 12.1a" in log
        assert "SM12x arch-specific targets requested: 12.1a" in log
        assert o.timings.configure_s.patched > 0 and o.timings.compile_s > 0
        first = o.compile_cache
        assert first is not None and not first.off and first.misses >= 1, first

        # the same sources, flags and toolchain, another MAX_JOBS: the probe step runs again
        path.write_text(text.replace("max_jobs = 2", "max_jobs = 1"))
        again = probe_stack(one(load_matrix(path), "src-0251", engine=engine), engine=engine,
                            log_dir=tmp_path / "logs", units=(MOE_DATA,), parts=("units",))
        refs.append(again.image_ref)
        assert again.image_ref != o.image_ref and again.status == "pass", again.reason
        assert (again.rows[0].archs, again.rows[0].verdicts) == (row.archs, row.verdicts)
        second = again.compile_cache
        assert second is not None and not second.off, second
        assert second.misses == 0 and second.uncacheable == 0, second  # compiles nothing
        assert second.hits >= first.misses and second.hit_rate == 1.0, second
        assert second.namespace == first.namespace
    finally:
        path.unlink()
        for ref in refs:
            engine.remove_image(ref)
        shutil.rmtree(tmp_path / "cache", ignore_errors=True)
