"""`harness report` on typed run directories: a format-2 run whose cells the run's own judge
(harness.stages.judge) made from real captured logs, the v1 example H200 run, and the v1 fixture
runs. The report renders recorded verdicts; it judges nothing.

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
from harness.fingerprint.parse import fingerprint
from harness.matrix.model import NOISE_FLOOR, Expect, SelectRule
from harness.report.data import load
from harness.report.write import write_report
from harness.results.build import BuildOutcome
from harness.results.model import (
    BenchLevel,
    BenchRecord,
    CellError,
    CellResult,
    MatrixInfo,
    MemoryRecord,
    ModelInfo,
    Requested,
    RunRecord,
    RunStatus,
    ServeState,
    Status,
    Verdict,
    VerdictStatus,
)
from harness.results.store import cell_key
from harness.stages.judge import Subject, compare_formats, judge, with_verdict

FAKE_TOKEN = "hf_" + "a1B2" * 9
LOGS = Path(__file__).resolve().parent / "fixtures" / "logs"
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "h200" / "run"
RUNS = Path(__file__).resolve().parent / "fixtures" / "runs"

# The matrix expectations of the run below: one select rule puts a graph-mode check on the FP8
# cell, so the report has a failed expect.* verdict to show.
EXPECT = Expect(select=(SelectRule(cells="qwen3moe-fp8", cudagraph_mode="PIECEWISE"),))


def _level(c: int, per_stream: list[float], aggregate: list[float]) -> BenchLevel:
    return BenchLevel(
        concurrency=c,
        per_stream_tok_s=median(per_stream),
        aggregate_tok_s=median(aggregate),
        samples={"per_stream_tok_s": per_stream, "aggregate_tok_s": aggregate},
    )


def _bench(c1: list[float], c8: list[float], prefill: float | None = None) -> BenchRecord:
    return BenchRecord(
        levels=(_level(1, c1, c1), _level(8, [x / 8 for x in c8], c8)),
        prefill_tok_s=prefill,
        prefill_prompt_tokens=4012 if prefill else None,
        cold_ttft_ms=310.0 if prefill else None,
        prefix_cache_hit_rate=0.97 if prefill else None,
        warm_ttft_ms=41.0 if prefill else None,
    )


def _cell(cell_id: str, quant: str, log: str | None, requested: dict, *, ready: str = "ready",
          bench: BenchRecord | None = None, memory: MemoryRecord | None = None,
          extra: tuple[Verdict, ...] = (), **fields) -> CellResult:
    """A cell judged by the run's one judge (harness.stages.judge) on a real captured log."""
    stack, model, config = cell_id.split("/")
    req = Requested(**requested)
    fp = fingerprint((LOGS / f"{log}.log").read_text(), process_ended=ready != "ready", hung=ready == "hung")
    j = judge(Subject(cell_id, req), EXPECT, fp, ready_state=ServeState(ready), exit_code=1 if ready == "exited" else None,
              bench=bench, memory=memory, extra=extra)
    return CellResult(
        id=cell_id, stack=stack, model=model, config=config, quantization=quant, runner="docker",
        status=j.status, verdicts=j.verdicts, requested=req,
        fingerprint=fp, bench=bench, memory=memory,
        durations={"startup_s": 100.0, "bench_s": 60.0, "total_s": 170.5}, **fields,
    )


NV = "vllm-0251/qwen3moe-nvfp4/moe=marlin"
FP8 = "vllm-0251/qwen3moe-fp8/moe=marlin"
HUM = "vllm-0330/qwen3moe-nvfp4/moe=humming,lin=flashinfer_b12x"
CRASH = "spark-121a/qwen3moe-nvfp4/moe=flashinfer_trtllm"
ERR = "vllm-0330/qwen3moe-fp8/lin=cutlass"
SKIP = "vllm-0330/qwen3moe-nvfp4/auto"
NOT_RUN = "vllm-0330/qwen3moe-fp8/moe=auto"


def _cells() -> list[CellResult]:
    cells = [
        # NVFP4 decoding slower than FP8 on the same stack and config: the rule must FAIL.
        _cell(NV, "nvfp4", "vllm43507_marlin_moe_cutlass_linear", {"moe_backend": "marlin"},
              bench=_bench([40.1, 40.9, 41.3], [250.0, 262.0, 258.0], prefill=9120.0),
              model_info=ModelInfo(active_params_b=3.0, bytes_per_param=0.5625),
              memory=MemoryRecord(host_slope_gib_per_h=-0.1, gpu_slope_gib_per_h=0.0, leak=False),
              compare_with=FP8),  # the matrix's pairing: family qwen3moe, as the run records it
        # Asks for PIECEWISE graphs; the select rule judges it (expect.cudagraph_mode).
        _cell(FP8, "fp8", "issue29955_config_dump_fragment", {"cudagraph_mode": "PIECEWISE"},
              bench=_bench([51.2], [300.0])),
        _cell(HUM, "nvfp4", "seeds000_humming_asked_marlin_linear",
              {"moe_backend": "humming", "linear_backend": "flashinfer_b12x"},
              bench=_bench([60.0, 62.0], [400.0, 420.0]),
              memory=MemoryRecord(host_slope_gib_per_h=-9.5, leak=True,
                                  reason="MemAvailable fell 9.5 GiB/h while idle")),
        _cell(CRASH, "nvfp4", "article_spark_gemm2", {"moe_backend": "flashinfer_trtllm"},
              ready="exited",
              # written straight to the file below, not through the store: the report masks too
              extra=(Verdict(check="serve.env", status=VerdictStatus.FAIL,
                             message=f"server env had HF_TOKEN={FAKE_TOKEN}"),)),
        # The tool itself raised inside this cell: an error, not a stack failure. Shaped as
        # harness.pipeline writes it: the exception, and a failed "error" verdict with its fix.
        CellResult(id=ERR, stack="vllm-0330", model="qwen3moe-fp8", config="lin=cutlass",
                   quantization="fp8", status=Status.ERROR,
                   requested=Requested(linear_backend="cutlass"),
                   verdicts=(Verdict(check="error", status=VerdictStatus.FAIL,
                                     message="ValueError: bench returned no level at c=1 "
                                             "(fix: rerun the cell)"),),
                   error=CellError(type="ValueError", message="bench returned no level at c=1",
                                   traceback=("Traceback (most recent call last):",
                                              '  File "harness/stages/measure.py", line 40',
                                              "ValueError: bench returned no level at c=1"))),
        # Not run on purpose (no GPU here): why is a warning verdict, not a failure.
        CellResult(id=SKIP, stack="vllm-0330", model="qwen3moe-nvfp4", config="auto",
                   quantization="nvfp4", status=Status.SKIPPED,
                   verdicts=(Verdict(check="host.gpu", status=VerdictStatus.WARN,
                                     message="skipped: no GPU on this host (nvml: not found)"),)),
    ]
    (rule,) = compare_formats(cells, EXPECT.nvfp4_over_fp8_min_ratio, NOISE_FLOOR)
    return [with_verdict(c, rule[1]) if c.id == rule[0] else c for c in cells]


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    """A format-2 run directory: the files as the store writes them (minus its masking)."""
    d = tmp_path / "20261130-101500-h200-local-a1b2c3"
    (d / "cells").mkdir(parents=True)
    (d / "builds").mkdir()
    cells = _cells()
    for c in cells:
        (d / "cells" / f"{cell_key(c.id)}.json").write_text(json.dumps(c.to_json()))
    run = RunRecord(
        run_id=d.name, tool_version="0.1.0",
        argv=["harness", "run", "-m", "matrix/h200-local.toml"],
        matrix=MatrixInfo(
            path="matrix/h200-local.toml", name="h200-local", hardware_name="h200",
            hardware={"cc": "9.0", "bandwidth_gbs": 4800, "memory_gib": 141},
            expect={"nvfp4_over_fp8_min_ratio": 1.0},
            bench={"concurrency": [1, 8], "repeats": 3},
            models={"qwen3moe-fp8": {"active_params_b": 3.0, "bytes_per_param": 1.0}},
        ),
        cells=[c.id for c in cells] + [NOT_RUN],
        status=RunStatus.FINISHED, started_at="2026-11-30T10:15:00Z",
        finished_at="2026-11-30T11:02:00Z",
    )
    (d / "run.json").write_text(json.dumps(run.to_json()))
    build = BuildOutcome(
        stack="vllm-0251", status="built", image_ref="vllm-bw:h200-0251-3fd1f3ecb15f",
        image_id="sha256:abc",
        audit={"status": "warn", "verdicts": [
            {"target": "SM_121", "status": "fail", "message": "no NVFP4 GEMM cubin loads"},
            {"target": "SM_90", "status": "pass", "message": "Marlin kernels load natively"},
        ]},
    )
    (d / "builds" / "vllm-0251.json").write_text(json.dumps(build.model_dump(mode="json")))
    return d


def test_rows_from_the_run(run_dir: Path) -> None:
    r = load(run_dir)
    by_id = {c.id: c for c in r.cells}
    assert [c.status for c in r.cells][-1] == "not run"
    # the NVFP4 cell fails the FP8-vs-NVFP4 rule, as the run judged it
    assert r.status_counts() == {"fail": 3, "crashed": 1, "skipped": 1, "error": 1, "not run": 1}
    nv = by_id[NV]
    assert nv.kernels["moe"].state == "ok" and nv.kernels["moe"].got == "MARLIN"
    assert nv.kernels["linear"].state == "auto"  # not asked: what the log shows, unjudged
    assert (nv.per_stream_c1.lo, nv.per_stream_c1.value, nv.per_stream_c1.hi) == (40.1, 40.9, 41.3)
    # 3e9 params x 0.5625 B x 40.9 tok/s / 4800 GB/s
    assert nv.efficiency_c1 == pytest.approx(3e9 * 0.5625 * 40.9 / 4800e9)
    fp8 = by_id[FP8]
    cg = fp8.kernels["cudagraph"]
    assert (cg.state, cg.asked, cg.got) == ("mismatch", "PIECEWISE", "FULL_AND_PIECEWISE")
    assert fp8.efficiency_c1 == pytest.approx(3e9 * 1.0 * 51.2 / 4800e9)  # from run.json models
    hum = by_id[HUM]
    assert hum.kernels["linear"].state == "mismatch"
    assert hum.efficiency_c1 is None and hum.roofline_note.startswith("n/a")
    assert hum.leak is True
    crash = by_id[CRASH]
    assert crash.kernels["moe"].state == "unconfirmed" and crash.autotuner == "gemm2: 10"
    err = by_id[ERR]
    assert err.status == "error" and err.error == "ValueError: bench returned no level at c=1"
    assert err.reasons == ("tool error: ValueError: bench returned no level at c=1 (fix: rerun the cell)",)
    assert by_id[SKIP].reasons == ("skipped: no GPU on this host (nvml: not found)",)
    # never served: no log, so nothing to show (not a pass, not a mismatch)
    assert (err.kernels["linear"].state, err.kernels["linear"].text) == ("auto", "n/a")
    (pair,) = r.pairs
    assert pair.stack == "vllm-0251" and pair.verdict == "FAIL at c=1"
    assert pair.ratio == pytest.approx(40.9 / 51.2)


def test_kernel_columns_come_from_the_verdicts_not_from_a_second_judge(run_dir: Path) -> None:
    """A verdict the run recorded is what the report shows, even where the kernel-name tables
    would say otherwise today: rejudging is `harness rejudge`'s job, not the report's."""
    path = run_dir / "cells" / f"{cell_key(NV)}.json"
    cell = CellResult.from_json(json.loads(path.read_text()))
    forged = tuple(v.model_copy(update={"status": VerdictStatus.FAIL, "got": "HUMMING",
                                        "message": "asked marlin, got HUMMING"})
                   if v.check == "moe_backend" else v for v in cell.verdicts)
    path.write_text(json.dumps(cell.model_copy(update={"verdicts": forged}).to_json()))
    moe = next(c for c in load(run_dir).cells if c.id == NV).kernels["moe"]
    assert (moe.state, moe.asked, moe.got) == ("mismatch", "marlin", "HUMMING")
    # and a request no verdict judged (no select rule on graph modes) is shown as such
    path = run_dir / "cells" / f"{cell_key(FP8)}.json"
    cell = CellResult.from_json(json.loads(path.read_text()))
    kept = tuple(v for v in cell.verdicts if v.check != "expect.cudagraph_mode")
    path.write_text(json.dumps(cell.model_copy(update={"verdicts": kept}).to_json()))
    cg = next(c for c in load(run_dir).cells if c.id == FP8).kernels["cudagraph"]
    assert (cg.state, cg.asked, cg.got) == ("unjudged", "PIECEWISE", "FULL_AND_PIECEWISE")
    assert cg.text == "asked PIECEWISE, no verdict recorded; the log shows FULL_AND_PIECEWISE"


def test_markdown_has_every_section_and_the_mismatches(run_dir: Path) -> None:
    md_path, _ = write_report(run_dir)
    md = md_path.read_text()
    for title in (
        "Status overview",
        "Tool errors",
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
    assert "**✗ expected PIECEWISE, got FULL_AND_PIECEWISE**" in md
    assert "0.80x" in md and "**✗ FAIL at c=1**" in md
    assert "**✗ LEAK**" in md
    assert "gemm2: 10" in md
    assert "**✗ asked flashinfer_trtllm, but the log has no MoE backend selection line**" in md
    assert "vllm-bw:h200-0251-3fd1f3ecb15f" in md and "no NVFP4 GEMM cubin loads" in md
    assert "not run" in md
    # the tool error: its own tone (a warning, not the ✗ of a stack failure) and its message
    assert f"| {ERR} | **⚠ error** | tool error: ValueError: bench returned no level at c=1 " in md
    assert f"| {SKIP} | skipped | skipped: no GPU on this host" in md
    assert "ValueError: bench returned no level at c=1" in md.split("## Tool errors")[1].split("##")[0]
    assert FAKE_TOKEN not in md and "HF_TOKEN=***" in md


def test_html_is_self_contained_with_inline_plots(run_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "elsewhere"
    assert main(["report", str(run_dir), "--out", str(out)]) == 0
    page = (out / "report.html").read_text()
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", page, re.IGNORECASE)
    assert "<link" not in page and "<script" not in page and "@import" not in page
    assert page.count("<svg") == 3  # decode, FP8 vs NVFP4, roofline
    assert 'class="bad">expected PIECEWISE, got FULL_AND_PIECEWISE' in page
    assert FAKE_TOKEN not in page
    assert not (run_dir / "report.html").exists()


def test_v1_example_renders(tmp_path: Path) -> None:
    """examples/h200/run (results format 1, a real H200 run) through the same typed path."""
    r = load(EXAMPLE)
    assert r.run_status == "finished" and r.status_counts() == {"pass": 2, "fail": 1}
    by_id = {c.id: c for c in r.cells}
    marlin = by_id["vllm-0251/qwen3moe-nvfp4/moe=marlin"]
    assert (marlin.kernels["moe"].state, marlin.kernels["moe"].asked) == ("ok", "marlin")
    assert marlin.kernels["attention"].got == "TRITON_ATTN"
    assert by_id["vllm-0251/qwen3moe-fp8/auto"].kernels["moe"].state == "auto"
    (pair,) = r.pairs
    # the run's own verdict (results format 1 stored no figures with it: the report parses no text)
    assert pair.verdict == "FAIL" and pair.nvfp4.comparison is None
    copy = tmp_path / "rejudged"
    shutil.copytree(EXAMPLE, copy)
    assert main(["rejudge", str(copy)]) == 0  # rejudge reports; it does not gate
    (pair,) = load(copy).pairs  # rejudged: the same verdict, with its figures (v3)
    assert pair.verdict == "FAIL at c=8" and pair.nvfp4.comparison.deciding_level.ratio < 0.75
    (build,) = r.builds
    assert build.status == "local" and build.image == "local:/opt/torch/.venv/bin/python3"
    md, _ = write_report(EXAMPLE, tmp_path)
    assert "247.5 (247.4-247.6, n=3)" in md.read_text()


def test_v1_fixture_run_shows_the_mismatch_and_the_crash() -> None:
    (cand,) = RUNS.glob("*-spark-candidate-*")
    by_id = {c.id: c for c in load(cand).cells}
    marlin = by_id["vllm-0251/qwen3moe-nvfp4/moe=marlin"]
    assert marlin.status == "fail"
    assert marlin.kernels["moe"].text == "asked marlin, got HUMMING"
    # not asked by the cell: the log's own record of a request (a log: verdict) disagrees
    assert marlin.kernels["linear"].state == "mismatch"
    crash = by_id["vllm-0251/qwen3moe-nvfp4/auto"]
    assert crash.status == "crashed" and "server exited before ready" in crash.reasons


@pytest.mark.parametrize("make", ["file", "under-a-file"])
def test_cli_out_that_cannot_hold_a_report_is_exit_2(run_dir, tmp_path, capsys, make) -> None:
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    target = blocker if make == "file" else blocker / "report"
    assert main(["report", str(run_dir), "--out", str(target)]) == 2
    err = "".join(capsys.readouterr().err.split())  # the console wraps long paths
    assert str(target) in err and "fix:" in err and "Traceback" not in err


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


def test_speculative_decoding_from_a_real_log_reaches_the_report(tmp_path):
    """GB10 + DFlash drafter (corpus 001): method, tokens, acceptance and the drafter's MoE kernel
    are facts of the fingerprint, shown in their own report section."""
    from harness.fingerprint.parse import fingerprint
    from harness.report.write import write_report
    from harness.results.model import CellResult, RunRecord
    from harness.results.store import RunStore

    log = LOGS / "corpus" / "001-gb10-v0251-dflash-laguna-nvfp4.log"
    fp = fingerprint(log.read_text(errors="replace"))
    assert fp.spec_method and fp.spec_acceptance_rate is not None
    store = RunStore.create(tmp_path, RunRecord(run_id="spec", cells=["s/m/c"]))
    store.write_cell(CellResult(id="s/m/c", stack="s", model="m", config="c", status="pass",
                                fingerprint=fp.to_json()))
    md = next(p for p in write_report(store.dir) if p.suffix == ".md").read_text()
    assert "## Speculative decoding" in md
    assert fp.spec_method in md and f"acceptance {fp.spec_acceptance_rate:.1%}" in md


def test_empty_sections_say_why_and_memory_slopes_say_what_they_mean(tmp_path: Path) -> None:
    """The Docker example asked for no prefill, and watched memory for seconds only."""
    docker = EXAMPLE.parent.parent / "h200-docker" / "run"
    md, _ = write_report(docker, tmp_path)
    text = md.read_text()
    assert ("No cell measured prefill: the run's bench config asks for none "
            "(run.json matrix.bench.prefill = false") in text
    # +47 GiB/h of MemAvailable over 21 s: not a leak, and not called "no" either
    memory = text[text.index("## Memory watch"):]
    row = next(line for line in memory.splitlines() if line.startswith("| local-0251/qwen3moe-fp8/auto | "))
    assert "not judged" in row and "host free +47.12 GiB/h" in row
    assert "a leak shows as a fall" in text and "1 GiB/h with r² >= 0.8" in text
    # the h200 example asked for prefill and measured it: no excuse line
    md2, _ = write_report(EXAMPLE, tmp_path / "h200")
    assert "No cell measured prefill" not in md2.read_text()


def test_the_header_names_the_card_found_and_a_bandwidth_the_matrix_does_not_have():
    """The committed runs: an H200 run of the H200 matrix, and the visit where an H100 ran it
    (cc 9.0 both): its roofline figures use the H200's 4800 GB/s, and the header says so."""
    from harness.report.data import load
    from harness.report.sections import header

    root = Path(__file__).resolve().parent.parent / "examples" / "h200-docker"
    h200 = dict(header(load(root / "run")))
    assert h200["GPU found"] == "NVIDIA H200 (cc 9.0)"
    h100 = dict(header(load(root / "rerun-at-main" / "visit-5-h100")))
    assert h100["hardware"] == "h200 (4800 GB/s)"
    assert h100["GPU found"] == ("NVIDIA H100 80GB HBM3 (cc 9.0): not the matrix's h200; this card reads 3350 GB/s, "
                                 "the roofline figures use 4800 GB/s")
