"""`python -m harness.audit TARGET ...`: the `harness audit` command with only the audit's own
imports (the full CLI imports every subcommand at start-up today)."""

from __future__ import annotations

import argparse
import sys

from harness.cli.audit import register
from harness.console import err
from harness.errors import HarnessError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m harness.audit")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["audit", *(sys.argv[1:] if argv is None else argv)])
    try:
        return int(args.func(args) or 0)
    except HarnessError as exc:
        err.print("[red]error:[/red]", end=" ")
        err.print(str(exc), markup=False)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
