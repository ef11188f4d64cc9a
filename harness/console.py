"""The two rich consoles: results to stdout, progress and diagnostics to stderr.

Both mask secrets in every string they print (harness.redact): a URL with a password in a plan
line, an error that echoes a matrix value, a log line; and show terminal control characters as
`?` (an escape in a commit subject or a path never reaches the terminal). This is the one way
the tool writes to a terminal, so nothing printed escapes the mask.
"""

import re

from rich.console import Console

from harness.redact import redact_text

# Terminal control characters (C0 but tab and newline, DEL, C1): a commit subject, a path or a
# command's output holding ESC ] 0 ; ... or ESC [ 2 J would retitle or clear the user's terminal.
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


def printable(text: str) -> str:
    """`text` with its secrets masked and its terminal control characters shown as `?`."""
    return _CONTROL.sub("?", redact_text(text))


class _Masked(Console):
    def print(self, *objects, **kwargs) -> None:
        super().print(*(printable(o) if isinstance(o, str) else o for o in objects), **kwargs)

    def print_json(self, json: str | None = None, **kwargs) -> None:
        super().print_json(printable(json) if isinstance(json, str) else json, **kwargs)


out = _Masked(highlight=False, soft_wrap=True)
# soft_wrap: a message is never folded inside a word (paths stay whole); the live lines and the
# cell blocks are fitted to the width by harness/cli/run.py itself
err = _Masked(stderr=True, highlight=False, soft_wrap=True)
