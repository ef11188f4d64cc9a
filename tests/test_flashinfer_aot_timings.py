"""examples/flashinfer-aot: the device script runs FlashInfer's AOT step as the default stacks do,
and timings.py reads its files right (the files of a real two-module run on this machine,
examples/flashinfer-aot/local-test/, and a stopped run made from them)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.image import render
from harness.matrix.load import load_matrix

ROOT = Path(__file__).resolve().parent.parent
EX = ROOT / "examples" / "flashinfer-aot"
sys.path.insert(0, str(ROOT / "tools"))
import flashinfer_aot_plan as plan  # noqa: E402


def test_device_script_runs_the_stacks_aot_command_and_variables():
    text = (EX / "device.sh").read_text()
    defaults = dict(re.findall(r'^(ARCHS|JOBS)=\$\{\1:-([^}]*)\}', text, re.M))
    stacks = [(m, s) for m, names in (("spark", ("spark-stock", "spark-121a")), ("rtx-pro-6000", ("rtx-120a",)))
              for s in names]
    want_archs, want_jobs = set(), set()
    for matrix, name in stacks:
        args = render.buildargs_for(load_matrix(ROOT / "matrix" / f"{matrix}.toml").spec.stacks[name])
        want_archs.add(args["FLASHINFER_CUDA_ARCH_LIST"])
        want_jobs.add(args["MAX_JOBS"])
    assert set(defaults["ARCHS"].split()) == want_archs == {"12.1a", "12.0a"}
    assert {defaults["JOBS"]} == want_jobs == {"8"}
    # the image's command, from FlashInfer's source tree, with the stack's two variables
    out = render.FLASHINFER_AOT_OUT
    assert f'MAX_JOBS="${{MAX_JOBS}}" python -m flashinfer.aot --out-dir {out} --build-dir {out}-build' in (
        render.FLASHINFER_AOT_STEP)
    assert "cd '$W/src' && FLASHINFER_CUDA_ARCH_LIST='$arch' MAX_JOBS='$JOBS'" in text
    assert "-- --out-dir '$d/out' --build-dir '$d/build'" in text
    assert 'cp -a "$W/src/3rdparty/cccl" "$W/src/flashinfer/data/cccl"' in text  # as `pip install .` leaves the tree


def test_families_partition_and_put_the_serving_path_first():
    order = plan.family_order()
    serving = plan.serving_families()
    assert order[: len(serving)] == serving and order[-1] == plan.OTHER
    assert [plan.family_of(n) for n in ("fp4_gemm_cutlass_sm120", "fp4_quantization_121", "fused_moe_120",
                                        "batch_decode_with_kv_cache_dtype_q_bf16_dtype_kv_e4m3_dtype_o_bf16_dtype_idx_i32"
                                        "_head_dim_qk_128_head_dim_vo_128_posenc_0_use_swa_False_use_logits_cap_False",
                                        "sampling", "norm", "xqa_input_f16_kv_cache_e4m3_output_f16_page_size_16",
                                        "vllm_comm", "spdlog")] == [
        "gemm_sm12x", "fp4_quantize", "fused_moe_cutlass", "attention_fa2_hd128", "sampling_norm", "sampling_norm",
        "xqa", "comm", "other"]


def timings(tmp_path: Path, run_root: Path, *extra: str) -> dict:
    out = tmp_path / "report"
    args = [sys.executable, str(EX / "timings.py"), "--jobs", "1", "--out", str(out)]
    for arch in ("12.1a", "12.0a"):
        d = run_root / f"a-{arch}"
        args += ["--run", f"{arch}={d}", "--ninja-log", f"{arch}={d / 'ninja.log'}"]
        args += [f"--audit={arch}={d / f'audit-{p}.json'}" for p in ("serving", "rest") if (d / f"audit-{p}.json").exists()]
    proc = subprocess.run([*args, *extra], capture_output=True, text=True, check=True)
    assert "## 12.1a" in proc.stdout
    return {"summary": json.loads((out / "summary.json").read_text()), "md": (out / "summary.md").read_text(),
            "tsv": (out / "modules.tsv").read_text().splitlines()}


def test_a_whole_run_is_measured_per_module_and_audited(tmp_path):
    got = timings(tmp_path, EX / "local-test")
    s121, s120 = got["summary"]["summaries"]
    assert s121["whole"]["kind"] == "measured" and s121["modules_done"] == s121["modules"] == 2
    assert list(s121["families"]) == ["sampling_norm", "other"]  # the measurement's order
    rows = [dict(zip(got["tsv"][0].split("\t"), r.split("\t"), strict=True)) for r in got["tsv"][1:]]
    silu = next(r for r in rows if r["arch"] == "12.1a" and r["module"] == "silu_and_mul")
    assert silu["state"] == "done" and silu["objects_done"] == silu["objects_total"] == "2"
    assert float(silu["step_s"]) > 0 and float(silu["wall_s"]) >= float(silu["step_s"]) - 0.2  # -j1
    audit = got["summary"]["audit"]
    assert audit["silu_and_mul@12.1a"]["cubins"] == {"sm_121a": 1}
    assert audit["silu_and_mul@12.0a"]["cubins"] == {"sm_120a": 1}
    assert "| silu_and_mul | sm_121a=1 |" in got["md"]


def test_a_stopped_run_keeps_what_finished_and_estimates_the_rest(tmp_path):
    # the same real files as the run was when stopped before spdlog's link: its .so line gone
    stopped = tmp_path / "stopped"
    shutil.copytree(EX / "local-test", stopped)
    for arch in ("12.1a", "12.0a"):
        log = stopped / f"a-{arch}" / "ninja.log"
        log.write_text("".join(ln for ln in log.read_text().splitlines(True)
                               if ln.startswith("#") or not ln.split("\t")[3].endswith("/spdlog.so")))
    s = timings(tmp_path, stopped)["summary"]["summaries"][0]
    assert s["modules_done"] == 1 and s["whole"]["kind"] == "ESTIMATE"
    other = s["families"]["other"]
    assert other["done"] == 0 and other["estimate_basis"].startswith("no run finished a module of this family")
    assert s["whole"]["wall_s"] >= s["measured_wall_s"]
    assert "an ESTIMATE" in timings(tmp_path, stopped)["md"]


@pytest.mark.parametrize("script", ["device.sh"])
def test_device_script_parses(script):
    subprocess.run(["bash", "-n", str(EX / script)], check=True)


def test_what_one_run_did_not_finish_is_estimated_from_the_other_runs_same_family(tmp_path):
    stopped = tmp_path / "stopped"
    shutil.copytree(EX / "local-test", stopped)
    log = stopped / "a-12.1a" / "ninja.log"  # 12.1a stopped before spdlog's link; 12.0a finished
    log.write_text("".join(ln for ln in log.read_text().splitlines(True)
                           if ln.startswith("#") or not ln.split("\t")[3].endswith("/spdlog.so")))
    s121, s120 = timings(tmp_path, stopped)["summary"]["summaries"]
    assert s120["whole"]["kind"] == "measured" and s121["whole"]["kind"] == "ESTIMATE"
    assert s121["families"]["other"]["estimate_basis"] == "the same family's finished modules in the 12.0a run"


def test_a_family_no_run_reached_costs_every_runs_mean_and_the_spread_of_the_measured_ones():
    """As on the 16-core visit: the 12.1a run finished only GEMM modules (dear per source), the
    12.0a run only attention ones (cheap). A family neither reached is estimated at the mean of
    every finished module of both runs, the same for both runs, and the whole step is given with
    the spread between the cheapest and the dearest measured family."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fi_timings", EX / "timings.py")
    assert spec and spec.loader
    t = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(t)

    def row(arch, family, module, sources, state, step_s):
        return {"arch": arch, "family": family, "module": module, "cuda_sources": sources, "state": state,
                "step_s": step_s}

    runs = {
        "12.1a": [row("12.1a", "gemm_sm12x", "g", 10, "done", 700.0), row("12.1a", "attention_fa2_hd128", "a", 20, "not started", 0.0),
                  row("12.1a", "xqa", "x", 100, "not started", 0.0)],
        "12.0a": [row("12.0a", "gemm_sm12x", "g", 10, "not started", 0.0), row("12.0a", "attention_fa2_hd128", "a", 20, "done", 300.0),
                  row("12.0a", "xqa", "x", 100, "not started", 0.0)],
    }
    events = {arch: [{"step": "build", "family": r[0]["family"] if arch == "12.1a" else r[1]["family"],
                      "start": "0", "end": "100", "exit": "0"}] for arch, r in runs.items()}
    rows = runs["12.1a"] + runs["12.0a"]
    shared, pooled = t.per_source_costs(rows), t.pooled_rate(rows)
    assert pooled == (700 + 300) / 30
    out = {arch: t.summarise(arch, r, events[arch], 8, shared, pooled=pooled) for arch, r in runs.items()}
    for s in out.values():
        xqa = s["families"]["xqa"]
        assert xqa["estimate_basis"].startswith("no run finished a module of this family")
        assert xqa["estimate_left_step_s"] == round(100 * pooled, 1)  # the same rate whichever run
        lo, hi = s["whole"]["range_wall_s"]
        assert lo < s["whole"]["wall_s"] < hi
    # the cheapest measured family costs 15 s a source, the dearest 70: xqa's 100 sources between
    s = out["12.1a"]
    use = s["slot_use_measured"]
    left_known = 20 * 15.0  # attention, from the 12.0a run
    assert s["whole"]["range_wall_s"] == [round(100 + (left_known + 100 * 15.0) / (8 * use), 1),
                                          round(100 + (left_known + 100 * 70.0) / (8 * use), 1)]
