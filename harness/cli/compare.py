"""`harness compare BASELINE CANDIDATE`: the rollout gate (exit 1 on any regression)."""

from __future__ import annotations

import argparse
import math
import os
from pathlib import Path

from harness.console import err, out
from harness.errors import ConfigError, Regression
from harness.safety import numbers


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
        "--floor", type=numbers.arg("--floor", float, lo=0, hi=1, lo_open=True, hi_open=True), help="noise floor as a fraction, 0 < floor < 1 "
        "(default: the matrix's bench.noise_floor, else the tool's default)"
    )
    p.add_argument(
        "--allow-kernel-changes",
        action="store_true",
        help="report changed kernel selections without failing (e.g. a deliberate vLLM bump)",
    )
    p.set_defaults(func=main)


def check_floor(floor: float | None) -> float | None:
    """A relative band: 0.02 is 2 %. Anything else would make every figure noise, or none."""
    if floor is None:
        return None
    if not math.isfinite(floor) or not 0 < floor < 1:
        raise ConfigError(
            f"--floor {floor}: the noise floor is a fraction between 0 and 1 (exclusive)",
            hint="give e.g. --floor 0.02 for 2 %, or leave it out to use the matrix's "
            "bench.noise_floor",
        )
    return floor


def check_output_file(path: Path, flag: str) -> Path:
    """Before any work: the file can be written (not a folder, its folder exists and is
    writable), so a long comparison or report never ends in a traceback."""
    path = Path(path)
    hint = f"give {flag} a file path in a folder you can write to"
    if path.is_dir():
        raise ConfigError(f"{flag} {path}: is a folder, not a file", hint=hint)
    parent = path.parent if str(path.parent) else Path(".")
    if not parent.is_dir():
        why = "is not a folder" if parent.exists() else "does not exist"
        raise ConfigError(f"{flag} {path}: {parent} {why}", hint=hint)
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise ConfigError(f"{flag} {path}: not writable", hint=hint)
    from harness.safety.writes import check_target

    return check_target(path, flag)  # never a symlink, a device or a FIFO at the target


def write_output(path: Path, text: str, flag: str) -> None:
    from harness.safety.writes import write_text

    try:
        write_text(path, text, flag=flag)
    except OSError as exc:
        raise ConfigError(f"{flag} {path}: cannot write it ({exc.strerror or exc})",
                          hint=f"give {flag} a file path in a folder you can write to") from None


def _missing(cmp) -> str:
    def few(ids) -> str:
        return ", ".join(ids[:10]) + (f" and {len(ids) - 10} more" if len(ids) > 10 else "") if ids else "none"
    return (f"missing from the candidate: {few(list(cmp.only_baseline))}; "
            f"missing from the baseline: {few(list(cmp.only_candidate))}")


def _check_matched(cmp, baseline: str, candidate: str) -> None:
    """Two runs that share no cell prove nothing: that is bad input (exit 2), never a pass."""
    if not cmp.compared:
        raise ConfigError(f"{baseline} and {candidate} share no cell: nothing to compare ({_missing(cmp)})",
                          hint="compare two runs of the same matrix (same cell ids), e.g. with the same -k")


def main(args: argparse.Namespace) -> int:
    from harness.results.compare import compare_runs, to_markdown
    from harness.results.store import RunStore

    floor = check_floor(args.floor)
    from harness.safety.writes import is_stdout

    md_to_stdout = is_stdout(args.md)  # `--md -` or /dev/stdout: the Markdown goes to standard output
    md_path = check_output_file(args.md, "--md") if args.md and not md_to_stdout else None
    base, cand = RunStore.open(args.baseline), RunStore.open(args.candidate)
    cmp = compare_runs(base, cand, floor=floor, kernel_changes_regress=not args.allow_kernel_changes)
    _check_matched(cmp, args.baseline, args.candidate)
    md = to_markdown(cmp)
    if md_path:
        write_output(md_path, md, "--md")
        err.print(f"wrote {md_path}", markup=False)
    if md_to_stdout or (not md_path and not args.json):
        out.print(md, markup=False, end="")
    if args.json:
        out.print_json(data=cmp.to_json())  # masked inside its strings: it stays JSON
    regs = cmp.regressions
    if regs:
        first = "; ".join(f"{f.cell}: {f.message}" for f in regs[:3])
        raise Regression(
            f"{len(regs)} regression(s) from {cmp.baseline.run_id} to {cmp.candidate.run_id}: "
            f"{first}{' ...' if len(regs) > 3 else ''}",
            hint="do not roll the candidate out; read the report, then `harness bug "
            f"{args.candidate} <cell id>` for an upstream report",
        )
    if cmp.only_baseline or cmp.only_candidate:
        err.print(f"not compared: {_missing(cmp)}", markup=False)
    err.print(f"no regression beyond noise over {len(cmp.compared)} cell(s)")
    return 0
