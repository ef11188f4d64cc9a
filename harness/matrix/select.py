"""`-k` expressions, as pytest reads them: substrings joined by and / or / not and parentheses.

`nvfp4 and not marlin` keeps the cells whose id contains 'nvfp4' and not 'marlin'. Matching is
case-insensitive, like pytest's.
"""

from __future__ import annotations

import re
from collections.abc import Callable

Predicate = Callable[[str], bool]

_TOKEN = re.compile(r"\s*(\(|\)|[^\s()]+)")


class SelectionError(ValueError):
    pass


def compile_expression(expr: str) -> Predicate:
    tokens = _tokens(expr)
    if not tokens:
        raise SelectionError("empty -k expression (example: 'nvfp4 and not marlin')")
    _bounded(tokens)
    pos, pred = _or(tokens, 0)
    if pos != len(tokens):
        raise SelectionError(f"unexpected '{tokens[pos]}' in -k expression '{expr}'")
    return pred


MAX_TOKENS = 256
MAX_NESTING = 32


def _bounded(tokens: list[str]) -> None:
    """A -k expression is a few words: a runaway one would exhaust the parser's recursion."""
    if len(tokens) > MAX_TOKENS:
        raise SelectionError(f"-k expression of {len(tokens)} words: at most {MAX_TOKENS}")
    depth = nots = 0
    for tok in tokens:
        depth += (tok == "(") - (tok == ")")
        nots = nots + 1 if tok == "not" else 0
        if depth > MAX_NESTING or nots > MAX_NESTING:
            raise SelectionError(f"-k expression nested deeper than {MAX_NESTING} levels")


def _tokens(expr: str) -> list[str]:
    out, pos = [], 0
    while pos < len(expr):
        m = _TOKEN.match(expr, pos)
        if not m:
            break
        out.append(m.group(1))
        pos = m.end()
    return out


def _or(t: list[str], i: int) -> tuple[int, Predicate]:
    i, left = _and(t, i)
    while i < len(t) and t[i] == "or":
        i, right = _and(t, i + 1)
        left = (lambda a, b: lambda s: a(s) or b(s))(left, right)
    return i, left


def _and(t: list[str], i: int) -> tuple[int, Predicate]:
    i, left = _not(t, i)
    while i < len(t) and t[i] == "and":
        i, right = _not(t, i + 1)
        left = (lambda a, b: lambda s: a(s) and b(s))(left, right)
    return i, left


def _not(t: list[str], i: int) -> tuple[int, Predicate]:
    if i < len(t) and t[i] == "not":
        i, inner = _not(t, i + 1)
        return i, lambda s: not inner(s)
    return _atom(t, i)


def _atom(t: list[str], i: int) -> tuple[int, Predicate]:
    if i >= len(t):
        raise SelectionError("-k expression ends where a word or '(' was expected")
    tok = t[i]
    if tok == "(":
        i, inner = _or(t, i + 1)
        if i >= len(t) or t[i] != ")":
            raise SelectionError("missing ')' in -k expression")
        return i + 1, inner
    if tok in (")", "and", "or"):
        raise SelectionError(f"unexpected '{tok}' in -k expression")
    needle = tok.lower()
    return i + 1, lambda s: needle in s.lower()
