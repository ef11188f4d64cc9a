"""`harness bug RUN_DIR CELL_ID`: print (or write) an upstream bug report for one cell.
`harness bug --bisect DIR --notes FILE` / `--configure RECORD --notes FILE`: one about what a
build decides, from a bisect's folder or from configure records; `--flashinfer-plan RECORD --notes
FILE`: one about what FlashInfer's AOT step compiles against what FlashInfer loads at run time."""

from __future__ import annotations

import argparse
from pathlib import Path

from harness.console import err, out
from harness.errors import ConfigError


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "bug",
        help="write a ready-to-file upstream bug report for one cell of a run, a bisect or configure records",
        description="Markdown with title, host and image fingerprints, patches, compiled "
        "archs, the exact serve command (secrets masked), expected vs actual, the log lines "
        "that prove it, a one-command reproduction and the likely upstream tracker. A cell "
        "that passed with no failed verdict has nothing to report (exit 2) unless --force. "
        "With --bisect DIR or --configure RECORD (repeatable) instead of a cell, the report is about "
        "what a vLLM build decides; with --flashinfer-plan RECORD, about what FlashInfer's AOT step "
        "compiles against what it loads at run time: the evidence comes from those files, the title, "
        "what was asked, the upstream references and the suggested fix from --notes (TOML).",
    )
    p.add_argument("run_dir", type=Path, nargs="?", help="results/<run-id>")
    p.add_argument("cell_id", nargs="?", help="the cell id, e.g. 'vllm-0251/qwen3moe-nvfp4/moe=marlin'")
    p.add_argument("--bisect", type=Path, metavar="DIR", help="a finished `harness bisect` folder")
    p.add_argument("--configure", type=Path, action="append", default=[], metavar="RECORD",
                   help="a configure record (record.json of tools/configure-targets.sh); repeatable")
    p.add_argument("--flashinfer-plan", type=Path, metavar="RECORD",
                   help="a FlashInfer AOT plan record (the --out of tools/flashinfer_aot_plan.py)")
    p.add_argument("--notes", type=Path, metavar="FILE",
                   help="with --bisect/--configure/--flashinfer-plan: the report's notes (TOML)")
    p.add_argument("--out", type=Path, help="write the report here instead of stdout")
    p.add_argument("--force", action="store_true",
                   help="write the report even for a cell with nothing wrong")
    p.set_defaults(func=main)


def _build_report(args: argparse.Namespace) -> str:
    from harness.bisect.upstream_report import bisect_report, configure_report, load_notes

    if args.run_dir or args.cell_id:
        raise ConfigError("give either RUN_DIR CELL_ID or --bisect/--configure/--flashinfer-plan, not both",
                          hint="a cell's report and a build's report are separate commands")
    if sum(map(bool, (args.bisect, args.configure, args.flashinfer_plan))) > 1:
        raise ConfigError("--bisect, --configure and --flashinfer-plan make different reports", hint="give one of them")
    if not args.notes:
        raise ConfigError("--bisect/--configure/--flashinfer-plan need --notes FILE",
                          hint="a TOML file with title, tracker, asked, known, known_why, suggested_fix "
                               "(see docs/bisect.md, 'With the bug report')")
    notes = load_notes(args.notes)
    if args.flashinfer_plan:
        from harness.bisect.flashinfer_report import flashinfer_plan_report

        if not args.flashinfer_plan.is_file():
            raise ConfigError(f"--flashinfer-plan {args.flashinfer_plan}: not a file",
                              hint="give the --out file of tools/flashinfer_aot_plan.py")
        return flashinfer_plan_report(args.flashinfer_plan, notes)
    if args.bisect:
        if not (args.bisect / "result.json").is_file():
            raise ConfigError(f"--bisect {args.bisect}: no result.json there",
                              hint="give the folder a `harness bisect` wrote (its --out)")
        return bisect_report(args.bisect, notes)
    for rec in args.configure:
        if not rec.is_file():
            raise ConfigError(f"--configure {rec}: not a file", hint="give the record.json of tools/configure-targets.sh")
    return configure_report(list(args.configure), notes)


def main(args: argparse.Namespace) -> int:
    from harness.cli.compare import check_output_file
    from harness.results.bug import write_report
    from harness.safety.writes import is_stdout, write_text

    # `--out -` or /dev/stdout: standard output, as with no --out
    target = check_output_file(args.out, "--out") if args.out and not is_stdout(args.out) else None
    if args.bisect or args.configure or args.flashinfer_plan:
        text = _build_report(args)
        if target:
            write_text(target, text, flag="--out")
    else:
        if not (args.run_dir and args.cell_id):
            raise ConfigError("give RUN_DIR and CELL_ID (or --bisect DIR / --configure RECORD with --notes)",
                              hint="e.g. harness bug results/<run-id> 'stack/model/moe=marlin'")
        from harness.results.store import RunStore

        store = RunStore.open(args.run_dir)
        text = write_report(store, args.cell_id, target, force=args.force)
    if target:
        err.print(f"wrote {target}", markup=False)
    else:
        out.print(text, markup=False)
    return 0
