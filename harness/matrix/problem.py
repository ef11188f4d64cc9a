"""One problem of a matrix file, as every checker of one writes it."""

from __future__ import annotations


def problem(where: str, what: str, fix: str) -> str:
    """One problem of a matrix file: `<key path>: <what is wrong>` and a `fix:` line."""
    return f"{where}: {_one_line(what)}\n      fix: {_one_line(fix)}"


def _one_line(text: str) -> str:
    # A key or value from the file may hold newlines; a message must not grow forged lines.
    return " ".join(text.split()) if ("\n" in text or "\r" in text) else text
