"""The two rich consoles: results to stdout, progress and diagnostics to stderr."""

from rich.console import Console

out = Console(highlight=False, soft_wrap=True)
# soft_wrap: a message is never folded inside a word (paths stay whole); the live lines and the
# cell blocks are fitted to the width by harness/cli/run.py itself
err = Console(stderr=True, highlight=False, soft_wrap=True)
