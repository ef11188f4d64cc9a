"""The two rich consoles: results to stdout, progress and diagnostics to stderr."""

from rich.console import Console

out = Console(highlight=False, soft_wrap=True)
err = Console(stderr=True, highlight=False)
