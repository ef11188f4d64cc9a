"""`harness bug RUN_DIR CELL_ID`: print (or write) an upstream bug report for one cell."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.console import err, out


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "bug",
        help="write a ready-to-file upstream bug report for one cell of a run",
        description="Markdown with title, host and image fingerprints, patches, compiled "
        "archs, the exact serve command (secrets masked), expected vs actual, the log lines "
        "that prove it, a one-command reproduction and the likely upstream tracker. A cell "
        "that passed with no failed verdict has nothing to report (exit 2) unless --force.",
    )
    p.add_argument("run_dir", type=Path, help="results/<run-id>")
    p.add_argument("cell_id", help="the cell id, e.g. 'vllm-0251/qwen3moe-nvfp4/moe=marlin'")
    p.add_argument("--out", type=Path, help="write the report here instead of stdout")
    p.add_argument("--force", action="store_true",
                   help="write the report even for a cell with nothing wrong")
    p.set_defaults(func=main)


def main(args: argparse.Namespace) -> int:
    from harness.cli.compare import check_output_file
    from harness.results.bug import write_report
    from harness.results.store import RunStore
    from harness.safety.writes import is_stdout

    # `--out -` or /dev/stdout: standard output, as with no --out
    target = check_output_file(args.out, "--out") if args.out and not is_stdout(args.out) else None
    store = RunStore.open(args.run_dir)
    text = write_report(store, args.cell_id, target, force=args.force)
    if target:
        err.print(f"wrote {target}", markup=False)
    else:
        out.print(text, markup=False)
    return 0
