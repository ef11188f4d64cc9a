"""`harness` command line: one sub-command per stage, and the only place that exits.

Each command lives in its own module, which exposes `register(subparsers)`; the parser it
adds sets `func(args) -> int`. Modules are imported only when listed here.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading

from harness import __version__
from harness.console import err
from harness.errors import BuildFailed, HarnessError

# (module, one-line help) in pipeline order; each module defines register().
COMMANDS: tuple[str, ...] = (
    "harness.matrix.cli",  # plan
    "harness.doctor",  # doctor
    "harness.hostenv",  # env
    "harness.run_cli",  # run
    "harness.audit.cli",  # audit
    "harness.fingerprint.cli",  # fingerprint
    "harness.bench.cli",  # bench
    "harness.build.cli",  # build
    "harness.build.addpr",  # patches add-pr
    "harness.results.compare_cli",  # compare
    "harness.results.bug_cli",  # bug
    "harness.report.cli",  # report
    "harness.bundle",  # bundle make|install
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="harness",
        description="Build, verify and measure vLLM stacks on Blackwell GPUs, in Docker.",
    )
    parser.add_argument("--version", action="version", version=f"harness {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS:
        importlib.import_module(name).register(sub)
    return parser


def _term_as_interrupt(signum, frame) -> None:
    # `timeout`, a CI runner or `docker stop` send SIGTERM: clean up as for Ctrl-C.
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _term_as_interrupt)
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        err.print("[red]interrupted[/red]: containers started by this run were removed")
        return 130
    except BuildFailed as exc:
        err.print("[red]error:[/red]", end=" ")
        err.print(str(exc), markup=False)
        for line in exc.log_tail[-20:]:
            err.print(f"  | {line}", markup=False)
        return exc.exit_code
    except HarnessError as exc:
        err.print("[red]error:[/red]", end=" ")
        err.print(str(exc), markup=False)
        return exc.exit_code


if __name__ == "__main__":
    sys.exit(main())
