"""Fuzz the matrix boundary: hostile matrices through `harness plan` and `harness build --dry-run`.

Whatever the file holds, the command ends with exit 0 (a valid matrix) or exit 2 with
`error:` and a `fix:` line on stderr; never an exception, so never a traceback. The CLI runs
in-process through harness.cli.main. Examples are derandomized (the same ones on every run,
so CI is stable) and bounded so the test stays well under a minute on a busy 2-core machine.
"""

from __future__ import annotations

import contextlib
import copy
import io
import string
from pathlib import Path

import pytest
import tomli_w
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from harness.cli import main

EXAMPLES = 120
PWNED = Path("/tmp/harness-fuzz-pwned")  # what the planted git injections would create

BASE: dict = {
    "matrix": {"name": "fuzz", "hardware": "gb10", "patches_dir": "patches"},
    "hardware": {"gb10": {"cc": "12.1", "bandwidth_gbs": 273, "memory_gib": 128}},
    "stacks": {
        "s": {"torch_cuda_arch_list": "12.1a",
              "base_image": {"repository": "nvidia/cuda", "tag": "13.0.1-devel-ubuntu24.04"},
              "torch": {"version": "2.14.0"}, "vllm": {"pypi": "0.33.0"},
              "flashinfer": {"version": "0.7.2.post1"}},
        "img": {"image": "vllm/vllm-openai:v0.33.0"},
        "loc": {"runner": "local", "local": {"python": "/usr/bin/python3"}},
    },
    "models": {"m": {"checkpoint": "org/model", "quantization": "fp8", "active_params_b": 3.3,
                     "bytes_per_param": 1.0}},
    "configs": {"auto": {}, "marlin": {"moe_backend": "marlin"}},
    "serve": {"port": 8000, "gpus": "all", "shm_size": "16g"},
    "bench": {"concurrency": [1, 8], "max_tokens": 256, "repeats": 3},
    "cells": {"stacks": ["*"]},
}

# Where a value may be put (table paths; the key is drawn or taken from KNOWN_KEYS).
TABLES = [
    ("matrix",), ("hardware", "gb10"), ("stacks", "s"), ("stacks", "s", "vllm"), ("stacks", "s", "flashinfer"),
    ("stacks", "s", "base_image"), ("stacks", "s", "torch"), ("stacks", "img"), ("stacks", "loc"),
    ("stacks", "loc", "local"), ("models", "m"), ("configs", "auto"), ("serve",), ("bench",), ("cells",), (),
]
KNOWN_KEYS = [
    "name", "hardware", "patches_dir", "cc", "bandwidth_gbs", "memory_gib", "git", "commit", "pypi", "patches",
    "version", "prs", "image", "runner", "python", "env", "args", "checkpoint", "allow_outside", "served_name",
    "max_model_len", "moe_backend", "cudagraph_mode", "port", "host_port", "gpus", "shm_size", "model_cache",
    "startup_timeout_s", "concurrency", "max_tokens", "prompt_tokens", "repeats", "noise_floor", "exclude",
    "only", "stacks", "models", "configs", "repository", "tag", "digest", "index_url", "torch_cuda_arch_list",
    "max_jobs", "local", "quantization", "load_format", "select", "expect", "bogus key", "\u00e9", "a\nb",
]
NASTY_STRINGS = [
    "--upload-pack=touch /tmp/harness-fuzz-pwned;", "-oProxyCommand=touch /tmp/x", "ext::sh -c touch% /tmp/x",
    "file:///etc/passwd", "/etc", "/etc/passwd", "passwd", "../../../../etc/passwd", "/var/run/docker.sock",
    "/", "/proc/self/environ", "/dev/sda", "~", "~/x", "", " ", "-", "--", "a\nb", "a\rb", "\x00", "x\x00y",
    "$(touch /tmp/x)", "`id`", "'; rm -rf / #", "${HOME}", "a b", "\u202e", "\ud7ff" * 3, "💥", "x" * 5000,
    "all", "none", "0,0", "banana", "16GiB", "lots", "16g", "0", "-1", "nan", "inf", "12.1a", "99.9z",
    "https://user:pw@github.com/a/b", "http://github.com/a/b", "git@github.com:a/b", "0" * 40, "g" * 40,
    "sha256:" + "0" * 64, "nvidia/cuda", "UPPER/Case:tag", "and or not (", "*", "[", "org/../etc",
]
scalars = st.one_of(
    st.sampled_from(NASTY_STRINGS),
    st.text(alphabet=string.printable + "\u00e9\u2028\x00", max_size=24),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.sampled_from([0, -1, 1, 65535, 65536, 4096, 4097, 10**6, 10**6 + 1, 10**26]),
    st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(),
)
values = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(KNOWN_KEYS), inner, max_size=3)),
    max_leaves=8,
)


def _deep(depth: int) -> list:
    v: list = []
    for _ in range(depth):
        v = [v]
    return v


@st.composite
def mutations(draw):
    kind = draw(st.sampled_from(["set", "set", "set", "delete", "deep", "attack"]))
    table = draw(st.sampled_from(TABLES))
    key = draw(st.sampled_from(KNOWN_KEYS))
    if kind == "set":
        return ("set", table, key, draw(values))
    if kind == "delete":
        return ("delete", table, key, None)
    if kind == "deep":
        return ("set", table, key, _deep(draw(st.integers(min_value=10, max_value=120))))
    return ("attack", draw(st.sampled_from(ATTACKS)), None, None)


ATTACKS = [
    {"matrix": {"patches_dir": "/etc"}, "stacks": {"s": {"vllm": {"patches": ["passwd"]}}}},
    {"stacks": {"s": {"vllm": {"patches": [{"path": "/etc/shadow", "allow_outside": True}]}}}},
    {"stacks": {"s": {"vllm": {"git": "--upload-pack=touch /tmp/harness-fuzz-pwned;", "commit": "0" * 40}}}},
    {"stacks": {"s": {"flashinfer": {"git": "ext::sh -c touch% /tmp/x", "commit": "0" * 40}}}},
    {"models": {"m": {"checkpoint": "/var/run/docker.sock", "allow_outside": True}}},
    {"models": {"m": {"checkpoint": "../../../../etc"}}},
    {"serve": {"model_cache": "/"}},
    {"stacks": {"img": {"torch": {"version": "1"}}}},
    {"bench": {"concurrency": []}},
    {"serve": {"host_port": -1, "gpus": "banana", "shm_size": "lots"}},
]


def _table(doc: dict, path: tuple) -> dict | None:
    node = doc
    for part in path:
        node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            return None
    return node if isinstance(node, dict) else None


def _merge(dst: dict, src: dict) -> None:
    for k, v in src.items():
        if isinstance(v, dict) and isinstance(dst.get(k), dict):
            _merge(dst[k], v)
        else:
            dst[k] = copy.deepcopy(v)


def apply(doc: dict, muts: list) -> dict:
    doc = copy.deepcopy(doc)
    for kind, a, b, c in muts:
        if kind == "attack":
            _merge(doc, a)
            continue
        table = _table(doc, a)
        if table is None:
            continue
        if kind == "delete":
            table.pop(b, None)
        else:
            table[b] = c
    return doc


def run_cli(argv: list[str]) -> tuple[int, str]:
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            rc = main(argv)
        except SystemExit as exc:  # argparse's own usage errors exit 2 from inside main
            rc = exc.code if isinstance(exc.code, int) else 2
    return rc, err.getvalue()


def check(path, argv_tail: list[str]) -> None:
    for argv in (["plan", "-m", str(path), *argv_tail], ["build", "--dry-run", "-m", str(path), *argv_tail]):
        rc, err = run_cli(argv)
        assert "Traceback" not in err, err
        assert rc in (0, 2), (argv, rc, err)
        if rc == 2 and argv[0] == "plan":
            assert "error:" in err and "fix:" in err, err


FUZZ = settings(max_examples=EXAMPLES, derandomize=True, deadline=None, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                       HealthCheck.data_too_large, HealthCheck.large_base_example])


@pytest.fixture
def fuzz_dir(tmp_path, default_sources):  # `build --dry-run` reads the pinned trees
    PWNED.unlink(missing_ok=True)
    (tmp_path / ".git").mkdir()  # the matrix's repository; it holds no patch, so nothing is fetched
    return tmp_path


@FUZZ
@given(muts=st.lists(mutations(), min_size=1, max_size=3))
def test_hostile_matrix_values(fuzz_dir, muts):
    doc = apply(BASE, muts)
    try:
        text = tomli_w.dumps(doc)
    except (TypeError, ValueError, RecursionError):
        return  # not expressible as TOML (tomli-w refuses it): no file could hold it
    path = fuzz_dir / "m.toml"
    path.write_text(text, encoding="utf-8")
    check(path, [])
    assert not PWNED.exists()


@FUZZ
@given(edits=st.lists(st.tuples(st.integers(min_value=0, max_value=10**6), st.integers(min_value=0, max_value=8),
                                st.sampled_from(["", "[", "]", "{", "}", "=", '"', "'", "\n", "\\", "\x00", "-",
                                                 "[[a]]", "a = 1", "\xff", "\ud800"])), min_size=1, max_size=4))
def test_hostile_matrix_text(fuzz_dir, edits):
    raw = tomli_w.dumps(BASE).encode()
    for pos, cut, insert in edits:
        pos %= len(raw) + 1
        raw = raw[:pos] + insert.encode("utf-8", "surrogatepass") + raw[pos + cut:]
    path = fuzz_dir / "m.toml"
    path.write_bytes(raw)
    check(path, [])


@FUZZ
@given(k=st.one_of(st.sampled_from(["and", "(", ")", "not", "s and (", "a or", "((((", "💥", "auto and not"]),
                   st.text(alphabet=string.ascii_letters + " ()", min_size=1, max_size=16)))
def test_hostile_k_expressions(fuzz_dir, k):
    path = fuzz_dir / "m.toml"
    path.write_text(tomli_w.dumps(BASE))
    check(path, [f"-k={k}"] if not k.startswith("-") else [])


def test_the_base_matrix_is_valid(fuzz_dir):
    # the fuzz starts from a matrix that loads: every rc 2 above is a mutation's doing
    path = fuzz_dir / "m.toml"
    path.write_text(tomli_w.dumps(BASE))
    assert run_cli(["plan", "-m", str(path)])[0] == 0
