"""The verdict stage: what a cell's log, benchmark and memory trend prove against the matrix.

Per cell: requested vs selected kernels ("asked X, got Y" is a FAIL), autotuner skips, known
signatures, `[[expect.select]]` rules, decode floor, output health, failed requests, memory.
Across cells: NVFP4 against FP8 on the same stack and config, judged beyond the noise band, and
re-appliable to a stored run (`harness rejudge`).
"""

from __future__ import annotations

from harness.fingerprint import verdicts
from harness.matrix.load import Matrix
from harness.matrix.plan import Cell


def judge(cell: Cell, matrix: Matrix, result: dict, fp, ready) -> None:
    expect = matrix.spec.expect
    req = cell.config
    if not ready.ready:
        result["status"] = {"exited": "crashed", "hung": "hung", "timeout": "timeout"}[ready.state]
        why = {"exited": f"server exited with code {ready.exit_code} before it was ready"
                         + (f" ({ready.detail})" if ready.detail else ""),
               "hung": f"start hung: {ready.detail}", "timeout": ready.detail}[ready.state]
        result["reasons"].append(why)
    vs = verdicts(
        fp,
        requested_moe=req.moe_backend if expect.kernels_match_request else None,
        requested_linear=req.linear_backend if expect.kernels_match_request else None,
        requested_attention=req.attention_backend if expect.kernels_match_request else None,
        max_autotuner_skips=expect.max_autotuner_skips,
        allowed_signatures=expect.allowed_signatures,
        require_selection=ready.ready,
    )
    out = [v.to_json() for v in vs]
    for rule in cell.select_rules(expect.select):
        for key, got in (("moe_backend", fp.moe_backend), ("attention_backend", fp.attention_backend),
                         ("cudagraph_mode", fp.cudagraph_mode)):
            want = getattr(rule, key)
            if want is not None and ready.ready:
                ok = (got or "").upper() == want.upper()
                out.append({"check": f"expect.{key}", "status": "pass" if ok else "fail",
                            "message": f"expected {want}, got {got}" if not ok else f"{key} is {got}",
                            "lines": [fp.evidence.get(key, "")] if fp.evidence.get(key) else []})
        if rule.linear_kernel is not None and ready.ready:
            ok = rule.linear_kernel in fp.linear_kernels
            out.append({"check": "expect.linear_kernel", "status": "pass" if ok else "fail",
                        "message": (f"{rule.linear_kernel} selected" if ok else
                                    f"expected {rule.linear_kernel}, got {', '.join(fp.linear_kernels) or 'none'}"),
                        "lines": []})
    bench = result.get("bench")
    if expect.min_decode_tok_s and bench:
        solo = per_stream(bench, 1)
        ok = solo is not None and solo >= expect.min_decode_tok_s
        out.append({"check": "expect.min_decode_tok_s", "status": "pass" if ok else "fail",
                    "message": f"decode {solo} tok/s at c=1 (floor {expect.min_decode_tok_s})", "lines": []})
    if bench:
        degenerate = [lv["concurrency"] for lv in bench.get("levels", []) if lv.get("degenerate")]
        if degenerate and cell.model.load_format != "dummy":  # random weights write noise by design
            out.append({"check": "output_health", "status": "fail",
                        "message": f"degenerate output (4-gram diversity < 0.6) at c={degenerate}",
                        "lines": []})
        failed = sum(lv.get("failed", 0) for lv in bench.get("levels", []))
        if failed:
            out.append({"check": "bench.failed_requests", "status": "fail",
                        "message": f"{failed} benchmark requests failed", "lines": []})
    mem = result.get("memory")
    if mem and mem.get("leak"):
        out.append({"check": "memory", "status": "fail", "message": mem.get("reason", "memory leak"),
                    "lines": []})
    result["verdicts"] = out
    result["reasons"] += [v["message"] for v in out if v["status"] == "fail"]
    if result["status"] is None:
        result["status"] = "fail" if any(v["status"] == "fail" for v in out) else "pass"


def per_stream(bench: dict, conc: int) -> float | None:
    for lv in bench.get("levels", []):
        if lv.get("concurrency") == conc:
            return lv.get("per_stream_tok_s")
    return None


def _samples(bench: dict, conc: int) -> list[float]:
    for lv in bench.get("levels", []):
        if lv.get("concurrency") == conc:
            vals = [v for v in (lv.get("samples") or {}).get("per_stream_tok_s", []) if v]
            return vals or ([lv["per_stream_tok_s"]] if lv.get("per_stream_tok_s") else [])
    return []


def compare_formats(cells: list[dict], ratio_min: float | None, noise_floor: float) -> list[tuple[str, dict]]:
    """The FP8-vs-NVFP4 rule: for each stack+config with both formats, a verdict on the NVFP4 cell.

    NVFP4 per-stream decode at c=1 must reach `ratio_min` x FP8. Per the seeds, a difference
    inside the noise band (the floor, or the spread of either side's repeats if larger) is not a
    loss: NVFP4 fails only when it is below ratio_min x FP8 by more than that band.
    Returns (nvfp4 cell id, verdict) pairs.
    """
    from harness.bench.noise import classify

    if ratio_min is None:
        return []
    by_key: dict[tuple[str, str], dict[str, dict]] = {}
    for c in cells:
        by_key.setdefault((c["stack"], c["config"]), {})[c["quantization"]] = c
    out = []
    for pair in by_key.values():
        if "nvfp4" not in pair or "fp8" not in pair:
            continue
        n, f = pair["nvfp4"], pair["fp8"]
        ns, fs = _samples(n.get("bench") or {}, 1), _samples(f.get("bench") or {}, 1)
        if not ns or not fs:
            continue
        change = classify([ratio_min * x for x in fs], ns, floor=noise_floor)
        ratio = change.candidate / (change.baseline / ratio_min)
        verdict_word = {"loss": "below", "noise": "within noise of", "gain": "above"}[change.kind]
        out.append((n["id"], {
            "check": "expect.nvfp4_over_fp8",
            "status": "fail" if change.kind == "loss" else "pass",
            "message": (f"NVFP4 {change.candidate:.1f} vs FP8 {change.baseline / ratio_min:.1f} tok/s per "
                        f"stream at c=1: ratio {ratio:.3f}, {verdict_word} the required {ratio_min:g} "
                        f"(noise band ±{change.band:.1%}; FP8 cell {f['id']})"),
            "lines": [],
        }))
    return out


def apply_format_rule(store) -> list[dict]:
    """(Re)apply the cross-cell FP8-vs-NVFP4 rule to the stored cells of a run, from its run.json.

    Idempotent: an earlier verdict of the same check is replaced. Returns the verdicts applied.
    """
    matrix = store.run.get("matrix", {})
    ratio_min = (matrix.get("expect") or {}).get("nvfp4_over_fp8_min_ratio")
    floor = (matrix.get("bench") or {}).get("noise_floor", 0.02)
    applied = []
    for cell_id, verdict in compare_formats([c for c in store.cells() if c], ratio_min, floor):
        c = store.read_cell(cell_id)
        if c is None:
            continue
        old = [v for v in c["verdicts"] if v["check"] == verdict["check"]]
        c["verdicts"] = [v for v in c["verdicts"] if v["check"] != verdict["check"]] + [verdict]
        c["reasons"] = [r for r in c["reasons"] if r not in {v["message"] for v in old}]
        if verdict["status"] == "fail":
            c["reasons"].append(verdict["message"])
        if c["status"] in ("pass", "fail"):
            c["status"] = "fail" if any(v["status"] == "fail" for v in c["verdicts"]) else "pass"
        store.write_cell(c)
        applied.append({"cell": cell_id, **verdict})
    return applied


def add_verdict(result: dict, verdict: dict) -> None:
    result["verdicts"].append(verdict)
    if verdict["status"] == "fail":
        result["reasons"].append(verdict["message"])
        if result["status"] == "pass":
            result["status"] = "fail"
