"""`harness compare BASELINE CANDIDATE`: the rollout gate (exit 1 on any regression)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from harness.console import err, out
from harness.errors import Regression
from harness.redact import redact_text
from harness.results.compare import compare_runs, to_markdown
from harness.results.store import RunStore, atomic_write_text


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "compare",
        help="compare two runs cell by cell; exit 1 on a regression beyond noise",
        description="Match cells by id and report changed kernel selections, new or vanished "
        "failure signatures, status changes, decode / prefill / TTFT changes beyond the noise "
        "band, and memory-leak flags. Exit status 1 when anything regressed, so it can gate a "
        "driver or image rollout.",
    )
    p.add_argument("baseline", type=Path, help="results/<run-id> of the baseline (current pin)")
    p.add_argument("candidate", type=Path, help="results/<run-id> of the candidate")
    p.add_argument("--md", type=Path, help="write the Markdown report to this file")
    p.add_argument("--json", action="store_true", help="print JSON instead of Markdown")
    p.add_argument(
        "--floor", type=float, help="noise floor as a fraction (default: the matrix's, else 0.02)"
    )
    p.add_argument(
        "--allow-kernel-changes",
        action="store_true",
        help="report changed kernel selections without failing (e.g. a deliberate vLLM bump)",
    )
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    base, cand = RunStore.open(args.baseline), RunStore.open(args.candidate)
    cmp = compare_runs(
        base, cand, floor=args.floor, kernel_changes_regress=not args.allow_kernel_changes
    )
    md = to_markdown(cmp)
    if args.md:
        atomic_write_text(args.md, md)
        err.print(f"wrote {args.md}")
    if args.json:
        out.print(redact_text(json.dumps(cmp.to_json(), indent=2)), markup=False)
    elif not args.md:
        out.print(md, markup=False, end="")
    regs = cmp.regressions
    if regs:
        first = "; ".join(f"{f.cell}: {f.message}" for f in regs[:3])
        raise Regression(
            f"{len(regs)} regression(s) from {cmp.baseline.run_id} to {cmp.candidate.run_id}: "
            f"{first}{' ...' if len(regs) > 3 else ''}",
            hint="do not roll the candidate out; read the report, then `harness bug "
            f"{args.candidate} <cell id>` for an upstream report",
        )
    err.print(f"no regression beyond noise over {len(cmp.compared)} cell(s)")
    return 0
