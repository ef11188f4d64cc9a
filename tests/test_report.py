"""`harness report` on a small run directory whose fingerprints come from real captured logs.

The browser test renders report.html in a real headless Chromium (Debian package `chromium`).
It skips when Chromium is absent; HARNESS_REQUIRE_BROWSER=1 (set in CI) makes that a failure.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path
from statistics import median

import numpy as np
import pytest

from harness.cli import main
from harness.fingerprint import fingerprint, verdicts
from harness.report import load, write_report

FAKE_TOKEN = "hf_" + "a1B2" * 9
LOGS = Path(__file__).resolve().parent / "fixtures" / "logs"


def _level(c: int, per_stream: list[float], aggregate: list[float]) -> dict:
    return {
        "concurrency": c,
        "per_stream_tok_s": median(per_stream),
        "aggregate_tok_s": median(aggregate),
        "spread": {},
        "samples": {"per_stream_tok_s": per_stream, "aggregate_tok_s": aggregate},
    }


def _bench(c1: list[float], c8: list[float], prefill: float | None = None) -> dict:
    return {
        "levels": [_level(1, c1, c1), _level(8, [x / 8 for x in c8], c8)],
        "prefill_tok_s": prefill,
        "prefill_prompt_tokens": 4012 if prefill else None,
        "cold_ttft_ms": 310.0 if prefill else None,
        "prefix_cache_hit_rate": 0.97 if prefill else None,
        "warm_ttft_ms": 41.0 if prefill else None,
    }


def _cell(
    cell_id: str,
    quant: str,
    log: str,
    requested: dict,
    *,
    status: str,
    bench: dict | None = None,
    record_verdicts: bool = True,
    **extra,
) -> dict:
    stack, model, config = cell_id.split("/")
    fp = fingerprint((LOGS / f"{log}.log").read_text())
    vs = verdicts(
        fp,
        requested_moe=requested.get("moe_backend"),
        requested_linear=requested.get("linear_backend"),
        requested_attention=requested.get("attention_backend"),
    )
    return {
        "format": 1,
        "id": cell_id,
        "stack": stack,
        "model": model,
        "config": config,
        "quantization": quant,
        "runner": "docker",
        "status": status,
        "reasons": [v.message for v in vs if v.status == "fail"],
        "verdicts": [v.to_json() for v in vs] if record_verdicts else [],
        "requested": {
            "moe_backend": None,
            "linear_backend": None,
            "attention_backend": None,
            "cudagraph_mode": None,
            **requested,
        },
        "fingerprint": fp.to_json(),
        "bench": bench,
        "durations": {"startup_s": 100.0, "bench_s": 60.0, "total_s": 170.5},
        **extra,
    }


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    d = tmp_path / "20261130-101500-h200-local-a1b2c3"
    (d / "cells").mkdir(parents=True)
    (d / "builds").mkdir()
    cells = [
        # NVFP4 decoding slower than FP8 on the same stack and config: the rule must FAIL.
        _cell(
            "vllm-0251/qwen3moe-nvfp4/moe=marlin",
            "nvfp4",
            "vllm43507_marlin_moe_cutlass_linear",
            {"moe_backend": "marlin"},
            status="pass",
            bench=_bench([40.1, 40.9, 41.3], [250.0, 262.0, 258.0], prefill=9120.0),
            model_info={"active_params_b": 3.0, "bytes_per_param": 0.5625},
            memory={
                "interval_s": 5,
                "samples": [],
                "host_slope_gib_per_h": -0.1,
                "gpu_slope_gib_per_h": 0.0,
                "leak": False,
                "reason": "",
            },
        ),
        # Recorded without verdicts: the report judges the graph-mode request itself.
        _cell(
            "vllm-0251/qwen3moe-fp8/moe=marlin",
            "fp8",
            "issue29955_config_dump_fragment",
            {"cudagraph_mode": "PIECEWISE"},
            status="pass",
            bench=_bench([51.2], [300.0]),
            record_verdicts=False,
        ),
        _cell(
            "vllm-0330/qwen3moe-nvfp4/moe=humming,lin=flashinfer_b12x",
            "nvfp4",
            "seeds000_humming_asked_marlin_linear",
            {"moe_backend": "humming", "linear_backend": "flashinfer_b12x"},
            status="fail",
            bench=_bench([60.0, 62.0], [400.0, 420.0]),
            memory={
                "interval_s": 5,
                "samples": [],
                "host_slope_gib_per_h": -9.5,
                "gpu_slope_gib_per_h": None,
                "leak": True,
                "reason": "MemAvailable fell 9.5 GiB/h while idle",
            },
        ),
        _cell(
            "spark-121a/qwen3moe-nvfp4/moe=flashinfer_trtllm",
            "nvfp4",
            "article_spark_gemm2",
            {"moe_backend": "flashinfer_trtllm"},
            status="crashed",
        ),
    ]
    cells[3]["reasons"].append(f"server env had HF_TOKEN={FAKE_TOKEN}")
    for c in cells:
        key = c["id"].replace("/", "__")
        (d / "cells" / f"{key}.json").write_text(json.dumps(c))
    run = {
        "format": 1,
        "run_id": d.name,
        "tool_version": "0.1.0",
        "argv": ["harness", "run", "-m", "matrix/h200-local.toml"],
        "matrix": {
            "path": "matrix/h200-local.toml",
            "name": "h200-local",
            "hardware_name": "h200",
            "hardware": {"cc": "9.0", "bandwidth_gbs": 4800, "memory_gib": 141},
            "expect": {"nvfp4_over_fp8_min_ratio": 1.0},
            "bench": {"concurrency": [1, 8], "repeats": 3},
            "models": {"qwen3moe-fp8": {"active_params_b": 3.0, "bytes_per_param": 1.0}},
        },
        "host": {},
        "cells": [c["id"] for c in cells] + ["vllm-0330/qwen3moe-fp8/moe=auto"],
        "status": "finished",
        "started_at": "2026-11-30T10:15:00Z",
        "finished_at": "2026-11-30T11:02:00Z",
    }
    (d / "run.json").write_text(json.dumps(run))
    build = {
        "status": "built",
        "image": {"ref": "vllm-bw:h200-0251-3fd1f3ecb15f", "id": "sha256:abc"},
        "audit": {
            "status": "warn",
            "verdicts": [
                {"target": "SM_121", "status": "fail", "message": "no NVFP4 GEMM cubin loads"},
                {"target": "SM_90", "status": "pass", "message": "Marlin kernels load natively"},
            ],
        },
    }
    (d / "builds" / "vllm-0251.json").write_text(json.dumps(build))
    return d


def test_rows_from_the_run(run_dir: Path) -> None:
    r = load(run_dir)
    by_id = {c.id: c for c in r.cells}
    assert [c.status for c in r.cells][-1] == "not run"
    assert r.status_counts() == {"pass": 2, "fail": 1, "crashed": 1, "not run": 1}
    nv = by_id["vllm-0251/qwen3moe-nvfp4/moe=marlin"]
    assert nv.kernels["moe"].state == "ok" and nv.kernels["moe"].got == "MARLIN"
    assert (nv.per_stream_c1.lo, nv.per_stream_c1.value, nv.per_stream_c1.hi) == (40.1, 40.9, 41.3)
    # 3e9 params x 0.5625 B x 40.9 tok/s / 4800 GB/s
    assert nv.efficiency_c1 == pytest.approx(3e9 * 0.5625 * 40.9 / 4800e9)
    fp8 = by_id["vllm-0251/qwen3moe-fp8/moe=marlin"]
    assert fp8.kernels["cudagraph"].state == "mismatch"
    assert fp8.efficiency_c1 == pytest.approx(3e9 * 1.0 * 51.2 / 4800e9)  # from run.json models
    hum = by_id["vllm-0330/qwen3moe-nvfp4/moe=humming,lin=flashinfer_b12x"]
    assert hum.kernels["linear"].state == "mismatch"
    assert hum.efficiency_c1 is None and hum.roofline_note.startswith("n/a")
    assert hum.leak is True
    (pair,) = r.pairs
    assert pair.stack == "vllm-0251" and pair.verdict == "FAIL"
    assert pair.ratio == pytest.approx(40.9 / 51.2)


def test_markdown_has_every_section_and_the_mismatches(run_dir: Path) -> None:
    md_path, _ = write_report(run_dir)
    md = md_path.read_text()
    for title in (
        "Status overview",
        "Kernel selection",
        "Decode",
        "FP8 vs NVFP4",
        "Roofline efficiency",
        "Prefill and prefix cache",
        "Memory watch",
        "Builds and binary audit",
    ):
        assert f"## {title}" in md
    assert "asked flashinfer_b12x, got MarlinNvFp4LinearKernel" in md
    assert "asked PIECEWISE, got FULL_AND_PIECEWISE" in md
    assert "0.80x" in md and "**✗ FAIL**" in md
    assert "**✗ LEAK**" in md
    assert "gemm2: 10" in md
    assert "**✗ asked flashinfer_trtllm, but the log has no MoE backend selection line**" in md
    assert "vllm-bw:h200-0251-3fd1f3ecb15f" in md and "no NVFP4 GEMM cubin loads" in md
    assert "not run" in md
    assert FAKE_TOKEN not in md and "HF_TOKEN=***" in md


def test_html_is_self_contained_with_inline_plots(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "elsewhere"
    assert main(["report", str(run_dir), "--out", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", page, re.IGNORECASE)
    assert "<link" not in page and "<script" not in page and "@import" not in page
    assert page.count("<svg") == 3  # decode, FP8 vs NVFP4, roofline
    assert 'class="bad">asked PIECEWISE, got FULL_AND_PIECEWISE' in page
    assert FAKE_TOKEN not in page
    assert not (run_dir / "report.html").exists()


def _chromium() -> str | None:
    return next((p for n in ("chromium", "chromium-browser") if (p := shutil.which(n))), None)


def test_html_renders_in_a_real_browser(run_dir: Path, tmp_path: Path) -> None:
    browser = _chromium()
    if browser is None:
        if os.environ.get("HARNESS_REQUIRE_BROWSER") == "1":
            pytest.fail("HARNESS_REQUIRE_BROWSER=1 but no chromium on PATH", pytrace=False)
        pytest.skip(
            "needs Chromium (apt-get install chromium); "
            "set HARNESS_REQUIRE_BROWSER=1 to make this a failure"
        )
    _, html_path = write_report(run_dir)
    shot = tmp_path / "shot.png"
    subprocess.run(
        [
            browser,
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--hide-scrollbars",
            f"--user-data-dir={tmp_path / 'profile'}",
            f"--screenshot={shot}",
            "--window-size=1280,2000",
            html_path.as_uri(),
        ],
        check=True,
        capture_output=True,
        timeout=90,
    )
    if os.environ.get("HARNESS_KEEP_SCREENSHOT"):
        shutil.copy(shot, os.environ["HARNESS_KEEP_SCREENSHOT"])
    import matplotlib.pyplot as plt

    pixels = (plt.imread(shot)[..., :3] * 255).round().astype(np.uint8)
    assert pixels.shape[:2] == (2000, 1280)
    colours = np.unique(pixels.reshape(-1, 3), axis=0)
    assert len(colours) > 50, "the page rendered nearly blank"
    assert (pixels.min(axis=2) < 128).mean() > 0.01, "too little dark ink: text did not render"
    # The mismatch highlight (#fde2e2) is on screen: the inline CSS was applied.
    assert (np.abs(pixels.astype(int) - (253, 226, 226)).sum(axis=2) < 6).any()
