"""`harness run`: the whole pipeline over the selected cells, with live progress."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.table import Table

from harness.console import err, out
from harness.errors import CellsFailed, ConfigError
from harness.matrix.cli import add_matrix_args
from harness.matrix.load import load_matrix
from harness.matrix.plan import expand

STATUS_STYLE = {"pass": "green", "fail": "red", "build-failed": "red", "crashed": "red",
                "hung": "red", "timeout": "red", "skipped": "yellow"}


def register(sub) -> None:
    p = sub.add_parser("run", help="build, serve, fingerprint and benchmark every selected cell")
    add_matrix_args(p)
    p.add_argument("--results", default="results", help="results root (default ./results)")
    p.add_argument("--resume", metavar="RUN_DIR", help="finish an interrupted run (skips finished cells)")
    p.add_argument("--keep-failed", action="store_true", help="keep the container of a failed cell")
    p.add_argument("--soak", type=float, default=0.0, metavar="SECONDS",
                   help="after the benchmark, keep a steady load this long while watching memory")
    p.add_argument("--no-bench", action="store_true", help="serve and fingerprint only")
    p.add_argument("--force-build", action="store_true", help="rebuild images even if they exist")
    p.add_argument("--allow-unpinned", action="store_true", help="build from a base image with no digest")
    p.add_argument("--cross-check", metavar="CMD",
                   help="shell command run against each ready server after the benchmark "
                        "(env: HARNESS_URL, HARNESS_MODEL, HARNESS_OUT)")
    p.add_argument("--no-report", action="store_true", help="do not write report.md/html at the end")
    p.set_defaults(func=run)

    r = sub.add_parser("rejudge", help="re-apply the cross-cell FP8-vs-NVFP4 rule to a stored run")
    r.add_argument("run_dir", help="a results/<run-id> directory")
    r.set_defaults(func=rejudge)


def rejudge(args) -> int:
    from harness.results.store import RunStore
    from harness.verdict import apply_format_rule

    store = RunStore.open(Path(args.run_dir))
    applied = apply_format_rule(store)
    for v in applied:
        style = "green" if v["status"] == "pass" else "red"
        out.print(f"[{style}]{v['status']:>4}[/{style}] {v['cell']}: ", end="")
        out.print(v["message"], markup=False)
    if not applied:
        out.print("no stack+config has both an FP8 and an NVFP4 cell with decode figures")
    return 0


def run(args) -> int:
    from harness.pipeline import RunOptions, exit_code, run_matrix
    from harness.verdict import per_stream

    resume = Path(args.resume) if args.resume else None
    k = args.k
    matrix_path = args.matrix
    if resume is not None:
        run_json = resume / "run.json"
        if not run_json.is_file():
            raise ConfigError(f"{resume}: not a run directory (no run.json)",
                              hint="pass the results/<run-id> directory of the run to resume")
        meta = json.loads(run_json.read_text())
        matrix_path = meta["matrix"]["path"]
        if k is None:  # an explicit -k widens the run; without one, finish what it planned
            k = meta.get("k")
    matrix = load_matrix(matrix_path)
    total = len(expand(matrix, k))
    seen = {"n": 0}

    def on_cell(cell: dict) -> None:
        seen["n"] += 1
        style = STATUS_STYLE.get(cell["status"], "white")
        solo = per_stream(cell.get("bench") or {}, 1)
        extra = f" decode@1 {solo:.1f} tok/s" if solo else ""
        err.print(f"[{seen['n']}/{total}] [{style}]{cell['status']:>12}[/{style}] {cell['id']}{extra}")
        for reason in cell["reasons"][:3]:
            err.print(f"      {reason}", markup=False)

    opts = RunOptions(results_root=Path(args.results), keep_failed=args.keep_failed, soak_s=args.soak,
                      bench=not args.no_bench, force_build=args.force_build,
                      allow_unpinned=args.allow_unpinned, cross_check=args.cross_check, argv=tuple(sys.argv), on_cell=on_cell)
    err.print(f"[bold]harness run[/bold] {matrix.path.name}: {total} cells")
    store = run_matrix(matrix, k=k, opts=opts, resume_dir=resume)
    cells = [c for c in store.cells() if c]
    table = Table(title=f"run {store.run['run_id']}")
    for col in ("cell", "status", "moe", "linear", "attention", "decode@1", "reasons"):
        table.add_column(col, overflow="fold")
    for c in cells:
        fp = c.get("fingerprint") or {}
        solo = per_stream(c.get("bench") or {}, 1)
        style = STATUS_STYLE.get(c["status"], "white")
        table.add_row(c["id"], f"[{style}]{c['status']}[/{style}]", fp.get("moe_backend") or "-",
                      ", ".join(fp.get("linear_kernels") or []) or "-", fp.get("attention_backend") or "-",
                      f"{solo:.1f}" if solo else "-", "; ".join(c["reasons"])[:300])
    out.print(table)
    if not args.no_report:
        try:
            from harness.report import write_report
        except ImportError:
            write_report = None
        if write_report is not None:
            paths = write_report(store.dir)
            err.print(f"report: {', '.join(str(p) for p in paths)}")
    out.print(f"results: {store.dir}")
    code = exit_code(store)
    if code:
        raise CellsFailed(f"{sum(1 for c in cells if c['status'] != 'pass')} of {len(cells)} cells did not pass",
                          hint=f"read {store.dir}/report.md, or `harness bug {store.dir} <cell>`")
    return 0
