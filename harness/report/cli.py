"""`harness report RUN_DIR`: write report.md and report.html for a finished (or partial) run."""

from __future__ import annotations

from harness.console import out


def register(sub) -> None:
    p = sub.add_parser(
        "report", help="write report.md and a self-contained report.html for a run directory"
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a results/<run-id> directory")
    p.add_argument("--out", default=None, metavar="DIR", help="write here instead of RUN_DIR")
    p.set_defaults(func=run)


def run(args) -> int:
    from harness.report import write_report  # matplotlib loads only when a report is asked for

    md, html = write_report(args.run_dir, args.out)
    out.print(f"wrote {md}", markup=False)
    out.print(f"wrote {html}", markup=False)
    return 0
