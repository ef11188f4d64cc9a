"""The two rich consoles: results to stdout, progress and diagnostics to stderr.

Both mask secrets in every string they print (harness.redact): a URL with a password in a plan
line, an error that echoes a matrix value, a log line. JSON goes through `print_json`, which
masks inside its string values only (harness.redact.redact_json), so machine output always
parses. Terminal control characters are shown as `?` (in JSON, escaped as \\u00XX): an escape
in a commit subject or a path never reaches the terminal. This is the one way the tool writes
to a terminal, so nothing printed escapes the mask; the `logging` records of every module come
here too (`log_to_console`).

A `Text` is masked like a string (a table's cells are `Text`: harness.tables masks and bounds
them itself). Markup is the tool's own: a string printed with markup that does not parse as
markup (data holding `[/red]`: a commit subject, a path) is printed as it stands, never raised
on; data meant for a markup string goes through `plain()` (masked and escaped). A string in
JSON output is at most MAX_JSON_STRING characters (a 50 MB log line a fingerprint quotes ends
in "… (N more characters)"): masked first, with a margin, so no secret is cut in two.
"""

from __future__ import annotations

import json as _json
import logging

from rich.console import Console
from rich.errors import MarkupError
from rich.markup import escape
from rich.text import Text

from harness.redact import CONTROL, redact_json, terminal_text

MAX_JSON_STRING = 256 * 1024
MAX_PRINTED = 4 << 20  # one printed string (a log line in a build's tail): past this, cut and said
_MASK_MARGIN = 4096


def _bounded(obj: object) -> object:
    """`obj` with every string longer than MAX_JSON_STRING (and the margin) cut before masking."""
    if isinstance(obj, str):
        return obj if len(obj) <= MAX_JSON_STRING + _MASK_MARGIN else obj[: MAX_JSON_STRING + _MASK_MARGIN]
    if isinstance(obj, dict):
        return {k: _bounded(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_bounded(v) for v in obj]
    return obj


def _cut(obj: object, full: object) -> object:
    """Masked `obj` cut to MAX_JSON_STRING, saying how much of the original `full` was left out."""
    if isinstance(obj, str) and isinstance(full, str) and len(full) > MAX_JSON_STRING:
        return obj[:MAX_JSON_STRING] + f" … ({len(full) - MAX_JSON_STRING} more characters)"
    if isinstance(obj, dict) and isinstance(full, dict) and len(obj) == len(full):
        return {k: _cut(v, f) for (k, v), f in zip(obj.items(), full.values(), strict=True)}
    if isinstance(obj, list) and isinstance(full, list | tuple) and len(obj) == len(full):
        return [_cut(v, f) for v, f in zip(obj, full, strict=True)]
    return obj


def printable(text: str) -> str:
    """`text` with its secrets masked and its terminal control characters shown as `?`; a text
    longer than MAX_PRINTED is masked with a margin, then cut, saying how much was left out."""
    if len(text) <= MAX_PRINTED:
        return terminal_text(text)
    return terminal_text(text[: MAX_PRINTED + _MASK_MARGIN])[:MAX_PRINTED] + \
        f" … ({len(text) - MAX_PRINTED} more characters)"


def plain(text: object) -> str:
    """Data for a markup string: masked, control characters shown as `?`, markup escaped."""
    return escape(printable(str(text)))


def masked(text: Text) -> Text:
    """`text` with its secrets masked and control characters shown as `?`; its styles are kept
    where the text did not change (a masked cell keeps the style of its whole)."""
    shown = printable(text.plain)
    if shown == text.plain:
        return text
    return Text(shown, style=text.style, justify=text.justify, overflow=text.overflow, no_wrap=text.no_wrap)


class _Masked(Console):
    def print(self, *objects, **kwargs) -> None:
        objs = [printable(o) if isinstance(o, str) else masked(o) if isinstance(o, Text) else o for o in objects]
        try:
            super().print(*objs, **kwargs)
        except MarkupError:  # data in a markup string: shown as it stands, never a traceback
            super().print(*objs, **{**kwargs, "markup": False})

    def status(self, status, *args, **kwargs):
        """A spinner line: its text is data (a commit subject), shown masked and never as markup."""
        return super().status(Text(printable(status)) if isinstance(status, str) else status, *args, **kwargs)

    def print_json(self, json: str | None = None, *, data: object = None, **kwargs) -> None:
        """`json` (a JSON text) or `data` (a JSON value), masked inside its strings, printed as
        JSON (never highlighted: the bytes are the document)."""
        if json is not None:
            try:
                data = _json.loads(json)
            except (ValueError, RecursionError):  # not JSON: shown as masked text, never raw
                self.print(json, markup=False, highlight=False)
                return
        text = _json.dumps(_cut(redact_json(_bounded(data)), data), indent=kwargs.pop("indent", 2), ensure_ascii=False,
                           allow_nan=False, default=str)
        # json escapes C0 itself; DEL and C1 (0x9b is CSI) are escaped too, the document unchanged
        text = CONTROL.sub(lambda m: f"\\u{ord(m.group()):04x}", text)
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
