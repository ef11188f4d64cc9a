"""Numbers from the command line and the environment: one parser, finite and in range, or refused.

Python's own `int()` and `float()` accept far more than a user means: `nan`, `inf`, `1e999`
(which is inf), `1_000`, surrounding spaces, and digits of every script (`int("١٢")` is 12,
`float("１e3")` is 1000.0). A NaN compares false with every bound, so a range check written
`if value > hi: refuse` lets it through, and an inf turned into bytes or seconds raises
OverflowError far from the flag that caused it. Here a number is ASCII digits in the plain
decimal forms (`12`, `-3`, `0.5`, `.5`, `1e3` for a float), at most 40 characters, finite, and
inside the range its caller names; anything else is one error naming the option or variable
(exit 2).

    numbers.parse("0.5", "--floor", float, lo=0, hi=1, lo_open=True, hi_open=True)  # 0.5
    numbers.env("HARNESS_X_MAX_GIB", float, default=50, lo=0, hi=1 << 20)            # from os.environ
    p.add_argument("--jobs", type=numbers.arg("--jobs", int, lo=1, hi=1024))        # argparse, exit 2
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Mapping
from typing import TypeVar

from harness.errors import ConfigError

N = TypeVar("N", int, float)

MAX_CHARS = 40
_INT = re.compile(r"[+-]?[0-9]+")
_FLOAT = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]{1,3})?")


def shown(text: object) -> str:
    """A value as a message quotes it: bare when it is short plain ASCII, else its repr (cut)."""
    if isinstance(text, str) and text and len(text) <= 40 and text.isascii() and text.isprintable() \
            and " " not in text:
        return text
    s = repr(text)
    return s if len(s) <= 60 else s[:57] + "..."


def describe(kind: type, lo: float | None = None, hi: float | None = None, lo_open: bool = False,
             hi_open: bool = False) -> str:
    """What a valid value is, in words: "a whole number from 1 to 1024"."""
    what = "a whole number" if kind is int else "a number"
    if lo is not None and hi is not None:
        if lo_open or hi_open:
            return f"{what} with {lo} {'<' if lo_open else '<='} value {'<' if hi_open else '<='} {hi}"
        return f"{what} from {lo} to {hi}"
    if lo is not None:
        return f"{what} {'above' if lo_open else 'of at least'} {lo}"
    if hi is not None:
        return f"{what} {'below' if hi_open else 'of at most'} {hi}"
    return f"{what} in ASCII digits" if kind is int else f"{what} (finite, in ASCII digits)"


def _outside(value: float, lo: float | None, hi: float | None, lo_open: bool, hi_open: bool) -> bool:
    return (lo is not None and (value < lo or (lo_open and value == lo))) or \
        (hi is not None and (value > hi or (hi_open and value == hi)))


def problem(text: object, kind: type[N], *, lo: float | None = None, hi: float | None = None,
            lo_open: bool = False, hi_open: bool = False) -> tuple[N | None, str | None]:
    """(value, None) when `text` is a `kind` number in the range; (None, why not) otherwise,
    worded to follow the value ("is not a finite number")."""
    if not isinstance(text, str):
        return None, "is not text"
    if len(text) > MAX_CHARS:
        return None, f"is longer than {MAX_CHARS} characters"
    if not text.isascii():
        return None, "holds characters other than ASCII digits"
    if not (_INT if kind is int else _FLOAT).fullmatch(text):
        return None, f"is not {describe(kind)}" if kind is int or text.lstrip("+-").lower() not in (
            "nan", "inf", "infinity") else "is not a finite number"
    value = kind(text)
    if isinstance(value, float) and not math.isfinite(value):
        return None, "is not a finite number"
    if _outside(value, lo, hi, lo_open, hi_open):
        return None, "is out of range"
    return value, None


def parse(text: object, name: str, kind: type[N], *, lo: float | None = None, hi: float | None = None,
          lo_open: bool = False, hi_open: bool = False, hint: str | None = None, sep: str = " ") -> N:
    """`text` as a `kind` number in the range, or a ConfigError (exit 2) naming `name`."""
    value, why = problem(text, kind, lo=lo, hi=hi, lo_open=lo_open, hi_open=hi_open)
    if why is not None or value is None:
        raise ConfigError(f"{name}{sep}{shown(text)} {why}",
                          hint=hint or f"give {name} {describe(kind, lo, hi, lo_open, hi_open)}")
    return value


def arg(name: str, kind: type[N], *, lo: float | None = None, hi: float | None = None,
        lo_open: bool = False, hi_open: bool = False) -> Callable[[str], N]:
    """An argparse `type=` for option `name`. A bad value raises the ConfigError of `parse`,
    which argparse lets through (it wraps only ValueError and TypeError) to the command line's
    one exit point: exit 2, naming the option, with the fix."""

    def convert(text: str) -> N:
        return parse(text, name, kind, lo=lo, hi=hi, lo_open=lo_open, hi_open=hi_open)

    return convert


def env(variable: str, kind: type[N], *, default: N, lo: float | None = None, hi: float | None = None,
        lo_open: bool = False, hi_open: bool = False, environ: Mapping[str, str] | None = None) -> N:
    """Environment variable `variable` as a `kind` number in the range; `default` when it is unset
    or empty; a ConfigError (exit 2) naming the variable otherwise."""
    text = (os.environ if environ is None else environ).get(variable)
    if text is None or text == "":
        return default
    return parse(text, f"environment variable {variable}", kind, lo=lo, hi=hi, lo_open=lo_open, hi_open=hi_open,
                 sep="=", hint=f"set {variable} to {describe(kind, lo, hi, lo_open, hi_open)}, or unset it")


def finite(value: object, name: str, *, lo: float | None = None, hi: float | None = None,
           lo_open: bool = False, hi_open: bool = False) -> float:
    """A number already read (a TOML float, a pydantic field) checked the same way: finite, in range."""
    fix = f"give {name} {describe(float, lo, hi, lo_open, hi_open)}"
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{name} {shown(value)} is not a number", hint=fix)
    if isinstance(value, float) and not math.isfinite(value):
        raise ConfigError(f"{name} {shown(value)} is not a finite number", hint=fix)
    if _outside(value, lo, hi, lo_open, hi_open):
        raise ConfigError(f"{name} {shown(value)} is out of range", hint=fix)
    return value
