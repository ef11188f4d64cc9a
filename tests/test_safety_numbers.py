"""One parser for every number from the command line or the environment (harness/safety/numbers.py):
ASCII digits in plain decimal forms, finite, in the caller's range; anything else one ConfigError
naming the option or variable."""

from __future__ import annotations

import math

import pytest

from harness.errors import ConfigError
from harness.safety import numbers

NOT_NUMBERS = ["nan", "NaN", "inf", "-inf", "Infinity", "1e999", "-1e999", "\u0661\u0662", "\uff11\uff12",
               "\u0967", "1_000", " 5", "5 ", "5\n", "0x10", "1e", ".", "", "+", "9" * 41, "1,5", "½"]


@pytest.mark.parametrize("text", NOT_NUMBERS)
@pytest.mark.parametrize("kind", [int, float])
def test_what_python_reads_as_a_number_and_a_user_does_not_mean_is_refused(text, kind):
    value, why = numbers.problem(text, kind)
    assert value is None and why, (text, value)
    with pytest.raises(ConfigError) as exc:
        numbers.parse(text, "--opt", kind)
    assert exc.value.message.startswith("--opt ") and exc.value.hint


@pytest.mark.parametrize(("text", "kind", "want"), [
    ("12", int, 12), ("-3", int, -3), ("+7", int, 7), ("0.5", float, 0.5), (".5", float, 0.5), ("5.", float, 5.0),
    ("1e3", float, 1000.0), ("2E-3", float, 0.002), ("12", float, 12.0), ("1e-999", float, 0.0),
])
def test_plain_decimal_numbers_are_read(text, kind, want):
    assert numbers.parse(text, "--opt", kind) == want


def test_the_range_is_the_callers():
    assert numbers.parse("1", "--floor", float, lo=0, hi=1, hi_open=False) == 1.0
    for text in ("0", "1"):
        with pytest.raises(ConfigError, match="out of range"):
            numbers.parse(text, "--floor", float, lo=0, hi=1, lo_open=True, hi_open=True)
    with pytest.raises(ConfigError) as exc:
        numbers.parse("5000", "--jobs", int, lo=1, hi=4096)
    assert exc.value.message == "--jobs 5000 is out of range" and "from 1 to 4096" in exc.value.hint


def test_an_environment_variable_is_named_and_unset_is_the_default():
    env = {"HARNESS_X": "nan", "HARNESS_Y": "", "HARNESS_Z": "\u0663"}
    with pytest.raises(ConfigError) as exc:
        numbers.env("HARNESS_X", float, default=1.0, lo=0, hi=10, environ=env)
    assert exc.value.message == "environment variable HARNESS_X=nan is not a finite number"
    assert "set HARNESS_X to a number from 0 to 10, or unset it" in exc.value.hint
    assert numbers.env("HARNESS_Y", float, default=1.5, environ=env) == 1.5  # empty: unset
    assert numbers.env("HARNESS_W", int, default=7, environ=env) == 7
    with pytest.raises(ConfigError, match="HARNESS_Z"):
        numbers.env("HARNESS_Z", int, default=0, environ=env)


def test_an_argparse_type_raises_the_config_error_argparse_lets_through():
    convert = numbers.arg("--soak", float, lo=0, hi=60)
    assert convert("1.5") == 1.5
    with pytest.raises(ConfigError, match="--soak inf is not a finite number"):
        convert("inf")


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, True, "1", None])
def test_a_number_already_read_is_checked_the_same_way(value):
    with pytest.raises(ConfigError):
        numbers.finite(value, "part_size_mb", lo=0.001, hi=1e6)
    assert numbers.finite(60, "part_size_mb", lo=0.001, hi=1e6) == 60
