"""The two rich consoles: results to stdout, progress and diagnostics to stderr.

Both mask secrets in every string they print (harness.redact): a URL with a password in a plan
line, an error that echoes a matrix value, a log line. JSON goes through `print_json`, which
masks inside its string values only (harness.redact.redact_json), so machine output always
parses. This is the one way the tool writes to a terminal, so nothing printed escapes the mask;
the `logging` records of every module come here too (`log_to_console`).
"""

from __future__ import annotations

import json as _json
import logging

from rich.console import Console

from harness.redact import redact_json, redact_text


class _Masked(Console):
    def print(self, *objects, **kwargs) -> None:
        super().print(*(redact_text(o) if isinstance(o, str) else o for o in objects), **kwargs)

    def print_json(self, json: str | None = None, *, data: object = None, **kwargs) -> None:
        """`json` (a JSON text) or `data` (a JSON value), masked inside its strings, printed as
        JSON (never highlighted: the bytes are the document)."""
        if json is not None:
            try:
                data = _json.loads(json)
            except (ValueError, RecursionError):  # not JSON: shown as masked text, never raw
                self.print(json, markup=False, highlight=False)
                return
        text = _json.dumps(redact_json(data), indent=kwargs.pop("indent", 2), ensure_ascii=False,
                           allow_nan=False, default=str)
        # printed as a plain string: rich's own print_json would re-parse it, and its markup and
        # highlighting have nothing to add to a document another program reads
        super().print(text, markup=False, highlight=False, soft_wrap=True, **kwargs)


out = _Masked(highlight=False, soft_wrap=True)
# soft_wrap: a message is never folded inside a word (paths stay whole); the live lines and the
# cell blocks are fitted to the width by harness/cli/run.py itself
err = _Masked(stderr=True, highlight=False, soft_wrap=True)


class _ConsoleHandler(logging.Handler):
    """A log record as one line on the error console, through its mask."""

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record)
        except Exception:  # noqa: BLE001 - a bad format string must not end the run
            self.handleError(record)
            return
        err.print(line, markup=False, highlight=False)


HANDLER_NAME = "harness-console"


def log_to_console(level: int = logging.WARNING) -> None:
    """Send every logger's records (the tool's and its libraries') to the error console, at
    `level` and above: set once by the command line. Nothing is left to Python's fallback
    handler (`logging.lastResort`), which writes unmasked to stderr."""
    root = logging.getLogger()
    for h in [h for h in root.handlers if h.get_name() == HANDLER_NAME]:
        root.removeHandler(h)
    handler = _ConsoleHandler()
    handler.set_name(HANDLER_NAME)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root.addHandler(handler)
    root.setLevel(level)
    # libraries speak at WARNING whatever -v says: their debug lines (urllib3's every request,
    # docker-py's API calls) would drown the commands the tool runs
    for name in ("urllib3", "docker", "paramiko", "filelock", "matplotlib", "PIL", "asyncio"):
        logging.getLogger(name).setLevel(max(level, logging.WARNING))
    logging.lastResort = None
