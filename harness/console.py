"""The two rich consoles: results to stdout, progress and diagnostics to stderr.

Both mask secrets in every string they print (harness.redact): a URL with a password in a plan
line, an error that echoes a matrix value, a log line. This is the one way the tool writes to
a terminal, so nothing printed escapes the mask.
"""

from rich.console import Console

from harness.redact import redact_text


class _Masked(Console):
    def print(self, *objects, **kwargs) -> None:
        super().print(*(redact_text(o) if isinstance(o, str) else o for o in objects), **kwargs)

    def print_json(self, json: str | None = None, **kwargs) -> None:
        super().print_json(redact_text(json) if isinstance(json, str) else json, **kwargs)


out = _Masked(highlight=False, soft_wrap=True)
# soft_wrap: a message is never folded inside a word (paths stay whole); the live lines and the
# cell blocks are fitted to the width by harness/cli/run.py itself
err = _Masked(stderr=True, highlight=False, soft_wrap=True)
