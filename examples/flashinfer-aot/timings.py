"""What each module and kernel family of FlashInfer's AOT step cost, from aot_timed.py's files.

usage: python timings.py --run ARCH=DIR [--run ARCH=DIR ...] --jobs N --out DIR
                         [--ninja-log ARCH=FILE ...] [--audit ARCH=AUDIT.json ...]

DIR is aot_timed.py's --log folder (events.tsv, plan.json, ninja.log). --ninja-log names a newer
copy of ninja's log (the live BUILD/cached_ops/.ninja_log of a run that was stopped: aot_timed.py
copies it only after each family). Writes to --out:
  modules.tsv    arch, family, module, CUDA sources, objects done/total, state (done: its .so
                 linked; partial; not started), start and end (s from the AOT step's start),
                 wall_s, step_s (the sum of its compile and link steps, as ninja logged them)
  summary.json   per arch and family: modules done/total, wall seconds, step-seconds, and for what
                 did not finish an ESTIMATE (named so): its step-seconds from the mean step-seconds
                 per CUDA source of the family's finished modules (or, for a family with none, of
                 all finished modules), its wall time at the parallel use of the -j slots measured
                 on the finished families
  summary.md     the same as tables
With --audit (harness audit --json of the finished modules, one report per arch), each module's row
also gets its cubin archs, PTX, and the NVFP4 GEMM kernels with and without the native block-scaled
FP4 MMA (OMMA.SF) in their SASS.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from flashinfer_aot_plan import family_order  # noqa: E402

ORDER = {name: i for i, name in enumerate(family_order())}


def read_events(path: Path) -> list[dict]:
    with path.open() as f:
        return list(csv.DictReader(f, delimiter="\t"))


def read_ninja(path: Path) -> list[tuple[int, int, int, str]]:
    """(line index, start ms, end ms, output) for every entry of a ninja log (v5..v7)."""
    out = []
    for i, line in enumerate(path.read_text().splitlines()):
        if line.startswith("#") or not line.strip():
            continue
        parts = line.split("\t")
        out.append((i, int(parts[0]), int(parts[1]), parts[3]))
    return out


def module_steps(events: list[dict], ninja: list[tuple[int, int, int, str]]) -> dict[str, list[tuple[float, float, str]]]:
    """module -> [(start, end, output)] in seconds from the epoch: each ninja run's entries are
    offset by its family's start (aot_timed.py records where each run's lines begin)."""
    runs = sorted((int(e["ninja_lines_before"]), float(e["start"])) for e in events if e["step"] == "build")
    out: dict[str, list[tuple[float, float, str]]] = defaultdict(list)
    for idx, start_ms, end_ms, output in ninja:
        begun = [s for before, s in runs if before <= idx]
        if not begun:
            continue
        t0 = begun[-1]
        out[Path(output).parent.name].append((t0 + start_ms / 1000, t0 + end_ms / 1000, output))
    return out


def audit_rows(path: Path) -> dict[str, dict]:
    """module -> what the audit found in its .so; an audit cut short by its time limit (no JSON) gives none."""
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    rows: dict[str, dict] = {}
    for f in doc.get("files", []):
        name = Path(f["path"]).stem
        rows[name] = {"cubins": f.get("cubins", {}), "ptx": f.get("ptx", []),
                      "nvfp4_gemm": f.get("families", {}).get("nvfp4_gemm", {})}
    for r in doc.get("nvfp4_sass", []):
        row = rows.setdefault(Path(r["path"]).stem, {"cubins": {}, "ptx": [], "nvfp4_gemm": {}})
        sass = row.setdefault("sass", [])
        sass.append({"arch": r["arch"], "kernels": r["kernels"], "native_fp4_mma": r["native_fp4_mma"],
                     "opcodes": r["opcodes"]})
    return rows


def analyse(arch: str, run: Path, ninja_path: Path | None, audits: list[Path]) -> tuple[list[dict], list[dict]]:
    events = read_events(run / "events.tsv")
    plan = json.loads((run / "plan.json").read_text())
    ninja_file = ninja_path if ninja_path and ninja_path.exists() else run / "ninja.log"
    steps = module_steps(events, read_ninja(ninja_file)) if ninja_file.exists() else {}
    gen = next((e for e in events if e["step"] == "generate"), None)
    t0 = float(gen["start"]) if gen else min((s for v in steps.values() for s, _e, _o in v), default=0.0)
    audited: dict[str, dict] = {}
    for path in audits:
        audited.update(audit_rows(path))
    rows = []
    for m in plan:
        got = steps.get(m["name"], [])
        linked = any(o.endswith(f"/{m['name']}.so") for _s, _e, o in got)
        objects_total = m["sources"] + 1  # one object per source, then the link
        state = "done" if linked else ("partial" if got else "not started")
        row = {"arch": arch, "family": m["family"], "module": m["name"], "cuda_sources": m["cuda_sources"],
               "objects_done": len(got), "objects_total": objects_total, "state": state,
               "start": round(min(s for s, _e, _o in got) - t0, 1) if got else None,
               "end": round(max(e for _s, e, _o in got) - t0, 1) if got else None,
               "step_s": round(sum(e - s for s, e, _o in got), 1)}
        row["wall_s"] = round(row["end"] - row["start"], 1) if got else None
        if m["name"] in audited:
            row["audit"] = audited[m["name"]]
        rows.append(row)
    return rows, events


def per_source_costs(rows: list[dict]) -> dict[str, tuple[float, str]]:
    """family -> (step-seconds per CUDA source of its finished modules, the runs they come from),
    over every run: the other arch list's modules of a family are the same sources for another
    target, the nearest thing to a measurement of what one run did not finish."""
    acc: dict[str, list] = defaultdict(lambda: [0.0, 0, set()])
    for r in rows:
        if r["state"] == "done":
            a = acc[r["family"]]
            a[0] += r["step_s"]
            a[1] += max(r["cuda_sources"], 1)
            a[2].add(r["arch"])
    return {f: (s / n, ", ".join(sorted(arches))) for f, (s, n, arches) in acc.items() if n}


def pooled_rate(rows: list[dict]) -> float | None:
    """Step-seconds per CUDA source over every finished module of every run: the fallback for a
    family no run finished (one run's own mean would lean on whichever families it reached)."""
    done = [r for r in rows if r["state"] == "done"]
    return sum(r["step_s"] for r in done) / sum(max(r["cuda_sources"], 1) for r in done) if done else None


def summarise(arch: str, rows: list[dict], events: list[dict], jobs: int,
              shared: dict[str, tuple[float, str]] | None = None, other_use: float | None = None,
              pooled: float | None = None) -> dict:
    fams: dict[str, dict] = {}
    for r in sorted(rows, key=lambda r: ORDER.get(r["family"], len(ORDER))):
        f = fams.setdefault(r["family"], {"modules": 0, "done": 0, "cuda_sources": 0, "step_s": 0.0,
                                         "done_step_s": 0.0, "done_cuda_sources": 0, "rows": []})
        f["modules"] += 1
        f["cuda_sources"] += r["cuda_sources"]
        f["step_s"] += r["step_s"]
        f["rows"].append(r)
        if r["state"] == "done":
            f["done"] += 1
            f["done_step_s"] += r["step_s"]
            f["done_cuda_sources"] += max(r["cuda_sources"], 1)
    done_all = [r for r in rows if r["state"] == "done"]
    overall = pooled if pooled is not None else pooled_rate(rows)
    # the spread of what an unmeasured family may cost: the cheapest and the dearest measured
    # family, per CUDA source (shared: every run's families)
    rates = [v[0] for v in (shared or {}).values()] or ([overall] if overall else [])
    walls = {e["family"]: (float(e["end"]) - float(e["start"]), e["exit"]) for e in events if e["step"] == "build"}
    finished = [f for name, f in fams.items() if f["done"] == f["modules"] and name in walls and walls[name][1] == "0"]
    busy = sum(f["step_s"] for f in finished)
    span = sum(walls[n][0] for n, f in fams.items() if f in finished)
    use = busy / (span * jobs) if span else None  # how full ninja kept its -j slots
    out: dict = {"arch": arch, "jobs": jobs, "slot_use_measured": round(use, 3) if use else None,
                 "families": {}}
    use_how = "measured slot use"
    if use is None and other_use:  # no family of this run finished: the other run's, at the same time
        use, use_how = other_use, "slot use measured on the other run"
    est_total_step = 0.0
    est_range = [0.0, 0.0]
    shared = shared or {}
    for name, f in fams.items():
        if f["done_cuda_sources"]:
            per_source, basis = f["done_step_s"] / f["done_cuda_sources"], "this family's finished modules"
        elif name in shared:
            per_source, basis = shared[name][0], f"the same family's finished modules in the {shared[name][1]} run"
        elif overall:
            per_source, basis = overall, ("no run finished a module of this family: every run's finished "
                                          "modules' mean per CUDA source")
        else:
            per_source, basis = None, "nothing finished: no estimate"
        guessed = not f["done_cuda_sources"] and name not in shared
        left = 0.0
        for r in f["rows"]:
            if r["state"] == "done":
                continue
            whole = (per_source or 0.0) * max(r["cuda_sources"], 1)
            left += max(whole - r["step_s"], 0.0)
            for i, rate in enumerate((min(rates), max(rates)) if guessed and rates else (per_source or 0.0,) * 2):
                est_range[i] += max(rate * max(r["cuda_sources"], 1) - r["step_s"], 0.0)
        est_total_step += left
        wall, status = walls.get(name, (None, None))
        out["families"][name] = {
            "modules": f["modules"], "done": f["done"], "cuda_sources": f["cuda_sources"],
            "wall_s": round(wall, 1) if wall is not None and f["done"] == f["modules"] else None,
            "step_s": round(f["step_s"], 1),
            "estimate_left_step_s": round(left, 1) if left else 0.0,
            "estimate_basis": "measured: all done" if f["done"] == f["modules"] else basis,
            "exit": status}
    measured_wall = sum(w for w, _s in walls.values())
    out["measured_wall_s"] = round(measured_wall, 1)
    out["measured_step_s"] = round(sum(f["step_s"] for f in fams.values()), 1)
    out["modules_done"] = len(done_all)
    out["modules"] = len(rows)
    if len(done_all) == len(rows):
        out["whole"] = {"kind": "measured", "wall_s": round(measured_wall, 1)}
    elif use and (overall or shared):
        left_wall = est_total_step / (jobs * use)
        out["whole"] = {"kind": "ESTIMATE", "wall_s": round(measured_wall + left_wall, 1),
                        "left_step_s": round(est_total_step, 1),
                        # the families no run reached, at the cheapest and at the dearest measured rate
                        "range_wall_s": [round(measured_wall + x / (jobs * use), 1) for x in est_range],
                        "how": (f"measured {measured_wall:.0f} s; what is left: {est_total_step:.0f} step-seconds "
                                f"at {jobs} jobs x {use:.2f} {use_how}")}
    else:
        out["whole"] = {"kind": "none", "why": "no family finished: nothing to estimate from"}
    return out


def markdown(summaries: list[dict], rows: list[dict]) -> str:
    lines = []
    for s in summaries:
        w = s["whole"]
        whole = (f"{w['wall_s']:.0f} s, measured" if w["kind"] == "measured" else
                 f"**about {w['wall_s']:.0f} s, an ESTIMATE** ({w['how']}; {w['range_wall_s'][0]:.0f}-"
                 f"{w['range_wall_s'][1]:.0f} s with the families no run reached at the cheapest and the dearest "
                 "measured family's cost per CUDA source)" if w["kind"] == "ESTIMATE" else w["why"])
        lines += [f"## {s['arch']}: {s['modules_done']} of {s['modules']} modules, whole step: {whole}", "",
                  "| family | modules done | CUDA sources | wall s | step-s | left (estimate) step-s | basis |",
                  "|---|---|---|---|---|---|---|"]
        for name, f in s["families"].items():
            lines.append(f"| {name} | {f['done']}/{f['modules']} | {f['cuda_sources']} | "
                         f"{f['wall_s'] if f['wall_s'] is not None else '-'} | {f['step_s']} | "
                         f"{f['estimate_left_step_s']} | {f['estimate_basis']} |")
        lines.append("")
        audited = [r for r in rows if r["arch"] == s["arch"] and "audit" in r]
        if audited:
            lines += ["| module | cubins | PTX | NVFP4 GEMM kernels | with OMMA.SF |", "|---|---|---|---|---|"]
            for r in audited:
                a = r["audit"]
                fp4 = sum(x["kernels"] for x in a.get("sass", []))
                native = sum(x["native_fp4_mma"] for x in a.get("sass", []))
                lines.append(f"| {r['module'][:60]} | {', '.join(f'{k}={v}' for k, v in a['cubins'].items()) or '-'} | "
                             f"{', '.join(a['ptx']) or '-'} | {fp4 or '-'} | {native if fp4 else '-'} |")
            lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--run", action="append", required=True, metavar="ARCH=DIR")
    p.add_argument("--ninja-log", action="append", default=[], metavar="ARCH=FILE")
    p.add_argument("--audit", action="append", default=[], metavar="ARCH=FILE", help="repeatable, per arch too")
    p.add_argument("--jobs", type=int, required=True, help="MAX_JOBS the runs had")
    p.add_argument("--out", type=Path, required=True)
    a = p.parse_args(argv)
    ninja = dict(x.split("=", 1) for x in a.ninja_log)
    audits: dict[str, list[Path]] = defaultdict(list)
    for x in a.audit:
        arch, path = x.split("=", 1)
        audits[arch].append(Path(path))
    rows, runs = [], []
    for spec in a.run:
        arch, folder = spec.split("=", 1)
        r, events = analyse(arch, Path(folder), Path(ninja[arch]) if arch in ninja else None, audits[arch])
        rows += r
        runs.append((arch, r, events))
    shared = per_source_costs(rows)
    pooled = pooled_rate(rows)
    first = [summarise(arch, r, events, a.jobs, shared, pooled=pooled) for arch, r, events in runs]
    uses = [s["slot_use_measured"] for s in first if s["slot_use_measured"]]
    summaries = [summarise(arch, r, events, a.jobs, shared, sum(uses) / len(uses) if uses else None, pooled)
                 for arch, r, events in runs]
    a.out.mkdir(parents=True, exist_ok=True)
    cols = ["arch", "family", "module", "cuda_sources", "objects_done", "objects_total", "state", "start", "end",
            "wall_s", "step_s"]
    with (a.out / "modules.tsv").open("w") as f:
        f.write("\t".join(cols) + "\n")
        for r in rows:
            f.write("\t".join("" if r[c] is None else str(r[c]) for c in cols) + "\n")
    (a.out / "summary.json").write_text(json.dumps({"summaries": summaries, "audit": {
        r["module"] + "@" + r["arch"]: r["audit"] for r in rows if "audit" in r}}, indent=1) + "\n")
    (a.out / "summary.md").write_text(markdown(summaries, rows))
    print((a.out / "summary.md").read_text())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
