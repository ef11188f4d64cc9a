"""`harness` command line: one sub-command per stage, and the only place that exits.

Each command lives in its own module, which exposes `register(subparsers)`; the parser it adds
sets `func(args) -> int`. Only the module of the command being run is imported (the others
only for `--help`), so `harness --version` and a small command start in a fraction of a
second. Exit codes are the same for every command: see harness/errors.py.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import signal
import sys
import threading

from harness import __version__
from harness.errors import EXIT_CODES

# command -> (module that registers it, one-line help for the overview), in pipeline order
COMMANDS: dict[str, tuple[str, str]] = {
    "plan": ("harness.cli.plan", "expand a matrix into cells"),
    "doctor": ("harness.cli.doctor", "check this host against a matrix"),
    "env": ("harness.cli.env", "this host's fingerprint"),
    "lock": ("harness.cli.lock", "pin base-image digests and PyPI sha256s next to the matrix"),
    "sources": ("harness.cli.sources", "fetch the pinned sources a source build needs (offline builds)"),
    "build": ("harness.cli.build", "build the stack images"),
    "cache": ("harness.cli.cache", "show or prune the compile cache that source builds share"),
    "audit": ("harness.cli.audit", "the GPU archs really compiled in a binary, wheel or image"),
    "run": ("harness.cli.run", "build, serve, fingerprint, benchmark and judge every cell"),
    "rejudge": ("harness.cli.run", "judge a stored run again"),
    "reap": ("harness.cli.run", "remove what dead runs left"),
    "fingerprint": ("harness.cli.fingerprint", "what a vLLM log proves"),
    "bench": ("harness.cli.bench", "benchmark a running server"),
    "patches": ("harness.cli.patches", "take an upstream PR as a pinned patch"),
    "compare": ("harness.cli.compare", "gate a rollout: two runs compared beyond noise"),
    "bug": ("harness.cli.bug", "an upstream bug report for one cell"),
    "bisect": ("harness.cli.bisect", "which upstream commit or release changed a verdict"),
    "report": ("harness.cli.report", "Markdown + HTML report of a run"),
    "bundle": ("harness.cli.bundle", "make / install a wheelhouse bundle for a host with no package index"),
}

EPILOG = "exit codes (every command):\n" + "\n".join(
    f"  {code:<4} {meaning}" for code, meaning in EXIT_CODES.items())


class _Parser(argparse.ArgumentParser):
    """argparse echoes a bad argument in its error: masked like every other output (a token
    given in the wrong place must not land in a CI log). Sub-parsers inherit the class, and
    with it `-v`, so it is read before or after the command's name."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.add_argument("-v", "--verbose", action="count", default=argparse.SUPPRESS,
                          help="also show every command the tool runs, with its arguments (debug log)")

    def error(self, message: str):
        from harness.redact import redact_text

        super().error(redact_text(message))


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    parser = _Parser(
        prog="harness",
        description="Build, verify and measure vLLM stacks on Blackwell GPUs, in Docker.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"harness {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    modules = [COMMANDS[only][0]] if only in COMMANDS else list(dict.fromkeys(m for m, _ in COMMANDS.values()))
    for name in modules:
        importlib.import_module(name).register(sub)
    return parser


def _command_of(argv: list[str]) -> str | None:
    return next((a for a in argv if not a.startswith("-")), None)


def _say(console, text: str) -> None:
    """An error message fitted to the terminal between words only: a path or an id longer than
    the line keeps a line of its own, whole (copy-pasteable), never folded inside."""
    import textwrap

    width = max(40, console.size.width)
    for line in text.splitlines():
        indent = " " * (len(line) - len(line.lstrip()) + (6 if line.lstrip().startswith("fix:") else 0))
        for part in textwrap.wrap(line, width=width, subsequent_indent=indent, break_long_words=False,
                                  break_on_hyphens=False) or [""]:
            console.print(part, markup=False, highlight=False)


def _term_as_interrupt(signum, frame) -> None:
    # `timeout`, a CI runner or `docker stop` send SIGTERM: clean up as for Ctrl-C.
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] in (["--version"], ["-V"]):
        print(f"harness {__version__}")
        return 0
    from harness.console import log_to_console

    log_to_console(logging.WARNING)  # before parsing: nothing leaves unmasked, from the start
    parser = build_parser(_command_of(argv))
    from harness.console import err
    from harness.errors import BuildFailed, HarnessError

    try:  # an option's type (harness.safety.numbers) refuses a value with a ConfigError, not a usage line
        args = parser.parse_args(argv)
    except HarnessError as exc:
        _say(err, f"error: {exc}")
        return exc.exit_code
    if getattr(args, "verbose", 0):
        log_to_console(logging.DEBUG)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _term_as_interrupt)
        # Ctrl-C must clean up even when this process was started with SIGINT ignored (a
        # background job of a non-interactive shell inherits SIG_IGN, and Python keeps it)
        signal.signal(signal.SIGINT, signal.default_int_handler)

    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        from harness import proc

        proc.end_all()  # the commands worker threads were waiting on, with their children
        err.print("[red]interrupted[/red]: containers started by this run were removed; "
                  "finished cells are on disk (`harness run --resume RUN_DIR`)")
        return 130
    except BuildFailed as exc:
        _say(err, f"error: {exc}")
        for line in exc.log_tail[-20:]:
            err.print(f"  | {line}", markup=False)
        return exc.exit_code
    except HarnessError as exc:
        _say(err, f"error: {exc}")
        return exc.exit_code
    except MemoryError:  # an input far larger than any the tool bounds for (exit 3: this host)
        err.print("error: out of memory: the input is larger than this process may hold", markup=False)
        err.print("  fix: give a smaller input (a log's tail: `tail -c 256M LOG > LOG.tail`), or raise the "
                  "memory limit (ulimit -v)", markup=False)
        return 3
    except OSError as exc:  # a path the user gave that cannot be read or written
        import errno

        host = exc.errno in (errno.ENOSPC, errno.EROFS, errno.EDQUOT)
        where = f"{exc.filename}: " if exc.filename else ""
        err.print("[red]error:[/red]", end=" ")
        err.print(f"{where}{exc.strerror or exc}", markup=False)
        err.print("  fix: " + ("free space or write elsewhere" if host else
                               "check the path: it must be a file you can read or write"),
                  markup=False)
        return 3 if host else 2


if __name__ == "__main__":
    sys.exit(main())
