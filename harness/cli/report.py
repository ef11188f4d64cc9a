"""`harness report RUN_DIR`: write report.md and report.html for a finished (or partial) run."""

from __future__ import annotations

from pathlib import Path

from harness.console import out


def register(sub) -> None:
    p = sub.add_parser(
        "report", help="write report.md and a self-contained report.html for a run directory"
    )
    p.add_argument("run_dir", metavar="RUN_DIR", help="a results/<run-id> directory")
    p.add_argument("--out", default=None, metavar="DIR", help="write here instead of RUN_DIR")
    p.set_defaults(func=run)


def run(args) -> int:
    from harness.errors import ConfigError

    # matplotlib loads only when a report is asked for
    from harness.report.write import write_report

    target = Path(args.out if args.out is not None else args.run_dir)
    flag = "--out" if args.out is not None else "RUN_DIR"
    if target.exists() and not target.is_dir():
        raise ConfigError(f"{flag} {target}: is a file, and the report is two files",
                          hint="give --out a folder (it is made if missing)")
    if not target.exists() and (target.suffix.lower() in (".html", ".htm", ".md") or not target.parent.is_dir()):
        raise ConfigError(f"{flag} {target}: no such folder (the report is two files, report.md and report.html)",
                          hint="give --out a folder; a missing one is made only inside an existing folder, "
                          "and never from a file name")
    try:
        md, html = write_report(args.run_dir, args.out)
    except OSError as exc:
        raise ConfigError(f"{flag} {target}: cannot write the report there ({exc.strerror or exc})",
                          hint="give --out a folder you can write to") from None
    out.print(f"wrote {md}", markup=False)
    out.print(f"wrote {html}", markup=False)
    return 0
