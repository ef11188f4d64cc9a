"""Hostile values through the real command line (`python -m harness` in a child process): numbers
that are not numbers, index templates that are format strings, build requirements read through
links or written as pip's other include forms, a `--python` that lies or floods, a locked
"wheel" that is not a zip.

Each case ends in exit 2 with one error naming the option, variable, file or line and no
traceback, within the test's timeout (a hang fails as a timeout, never by a clock assertion),
with nothing outside the inputs read into the output.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CANARY = "Zq7canary9Xw"  # the content of every file a planted link points at


def cli(*args: object, cwd: Path, env: dict[str, str] | None = None, timeout: float = 240) -> tuple[int, str]:
    """`python -m harness ARGS` as a user runs it: (exit code, stdout + stderr)."""
    full = {**os.environ, "PYTHONPATH": str(ROOT), "HOME": str(cwd / "home"), "COLUMNS": "200", **(env or {})}
    r = subprocess.run([sys.executable, "-m", "harness", *map(str, args)], cwd=cwd, env=full, capture_output=True,
                       text=True, timeout=timeout, stdin=subprocess.DEVNULL)
    return r.returncode, r.stdout + r.stderr


def refused(rc: int, text: str, *names: str) -> str:
    said = " ".join(text.split())
    assert rc == 2, text[-3000:]
    assert "Traceback" not in text, text[-3000:]
    assert said.count("error:") == 1, text[-3000:]
    for name in names:
        assert name in said, (name, said[-3000:])
    return said


# -- numbers ------------------------------------------------------------------------------------

# what Python's float() and int() take and a user does not mean: not-a-number, infinities, a
# float past its range (1e999 is inf), digits of other scripts (int("١٢") is 12), underscores
NOT_NUMBERS = ["nan", "inf", "-inf", "1e999", "\u0661\u0662", "\uff11\uff12", "1_000", "0x10", "9" * 41]
OPTIONS = [
    (["bisect", ".", "--good", "a", "--bad", "b", "--timeout", "{v}", "--", "true"], "--timeout"),
    (["run", "--soak", "{v}"], "--soak"),
    (["compare", "a", "b", "--floor", "{v}"], "--floor"),
    (["fingerprint", "x.log", "--max-autotuner-skips", "{v}"], "--max-autotuner-skips"),
    (["audit", "x", "--jobs", "{v}"], "--jobs"),
    (["audit", "x", "--top", "{v}"], "--top"),
    (["bench", "--url", "http://127.0.0.1:9", "--model", "m", "--timeout", "{v}"], "--timeout"),
    (["bench", "--url", "http://127.0.0.1:9", "--model", "m", "--max-tokens", "{v}"], "--max-tokens"),
    (["bench", "--url", "http://127.0.0.1:9", "--model", "m", "--repeats", "{v}"], "--repeats"),
    (["bench", "--url", "http://127.0.0.1:9", "--model", "m", "--prompt-tokens", "{v}"], "--prompt-tokens"),
    (["patches", "add-pr", "vllm", "{v}"], "pull request NUMBER"),
]
# every option with each kind of non-number once, and the first two options with all of them
CASES = [(argv, name, v) for i, (argv, name) in enumerate(OPTIONS)
         for j, v in enumerate(NOT_NUMBERS) if i < 2 or j % len(OPTIONS) == i % len(NOT_NUMBERS)]
CASES += [(argv, name, NOT_NUMBERS[i % len(NOT_NUMBERS)]) for i, (argv, name) in enumerate(OPTIONS[2:], 2)]


@pytest.mark.parametrize(("argv", "name", "value"), CASES, ids=[f"{n}={v!a}" for _, n, v in CASES])
def test_a_number_that_is_not_one_is_refused_naming_the_option(tmp_path, argv, name, value):
    rc, text = cli(*[a.replace("{v}", value) for a in argv], cwd=tmp_path)
    refused(rc, text, name)


def test_bench_concurrency_in_other_digits_is_refused(tmp_path):
    rc, text = cli("bench", "--url", "http://127.0.0.1:9", "--model", "m", "--concurrency", "\u0661,8", cwd=tmp_path)
    refused(rc, text, "--concurrency")


@pytest.mark.parametrize("value", ["1e-9", "nan", "inf", "1e999", "-1", "0"])
def test_bundle_make_part_size_out_of_reason_is_refused(tmp_path, value):
    spec = tmp_path / "spec.toml"
    spec.write_text(f'name = "t"\nrequirements = ["tinything==1.0"]\npart_size_mb = {value}\n')
    rc, text = cli("bundle", "make", spec, "--out", tmp_path / "out", "--downloaded", tmp_path, cwd=tmp_path)
    refused(rc, text, "part_size_mb")
    assert not (tmp_path / "out").exists()


# -- an index template ---------------------------------------------------------------------------

@pytest.mark.parametrize("index", ["{0}", "https://x.invalid/{nope}/json", "https://x.invalid/{name:999999999999}",
                                   "https://x.invalid/{name.__class__}", "https://x.invalid/{name}{", "{}"])
def test_an_index_template_is_never_a_format_string(tmp_path, index):
    rc, text = cli("bisect", "pypi:vllm", "--good", "0.1.0", "--bad", "0.2.0", "--index", index, "--", "true",
                   cwd=tmp_path)
    refused(rc, text, "--index", "{name}")


# -- build requirements from a cached source tree -----------------------------------------------

MATRIX = """
[matrix]
name = "h"
hardware = "gb10"
[hardware.gb10]
cc = "12.1"
bandwidth_gbs = 273
memory_gib = 128
[stacks.src]
python = "3.12"
torch_cuda_arch_list = "12.1a"
[stacks.src.base_image]
repository = "nvidia/cuda"
tag = "13.0.1-devel-ubuntu24.04"
unpinned_reason = "a test matrix"
[stacks.src.torch]
version = "2.14.0"
index_url = "https://download.pytorch.org/whl/cu130"
[stacks.src.vllm]
pypi = "9.9.9"
sdist_sha256 = "0000000000000000000000000000000000000000000000000000000000000000"
[stacks.src.flashinfer]
version = "9.9.9"
sdist_sha256 = "0000000000000000000000000000000000000000000000000000000000000000"
cubin = false
[models.m]
checkpoint = "org/model"
quantization = "fp8"
active_params_b = 3.3
bytes_per_param = 1.0
[configs.auto]
"""


@pytest.fixture
def source(tmp_path):
    """A source stack whose pinned trees are already in the cache (HARNESS_CACHE_DIR), as
    `harness sources fetch` leaves them: the build requirements are read from these files."""
    cache = tmp_path / "cache"
    vllm = cache / "sources" / "vllm-pypi-9.9.9"
    (vllm / "requirements" / "build").mkdir(parents=True)
    (vllm / ".harness-complete").write_text("vllm\n")
    (vllm / "pyproject.toml").write_text('[build-system]\nrequires = ["wheel", "torch==2.14.0"]\n')
    (vllm / "requirements" / "build" / "cuda.txt").write_text("cmake>=3.26\n")
    fi = cache / "sources" / "flashinfer-pypi-9.9.9"
    fi.mkdir(parents=True)
    (fi / ".harness-complete").write_text("flashinfer\n")
    (fi / "pyproject.toml").write_text('[build-system]\nrequires = ["setuptools"]\n')
    outside = tmp_path / "outside"
    (outside / "build").mkdir(parents=True)
    for f in ("secret.txt", "build/cuda.txt"):
        (outside / f).write_text(f"{CANARY}-package==1\n")
    (tmp_path / "m.toml").write_text(MATRIX)
    return vllm, outside


def dry_run(tmp_path) -> tuple[int, str]:
    return cli("build", "--dry-run", "-m", tmp_path / "m.toml", cwd=tmp_path,
               env={"HARNESS_CACHE_DIR": str(tmp_path / "cache"), "DOCKER_HOST": "unix:///nonexistent.sock"})


def test_the_cached_tree_is_read_as_it_is(tmp_path, source):
    rc, text = dry_run(tmp_path)
    assert rc == 0 and "Traceback" not in text, text[-3000:]
    said = " ".join(text.split())
    assert "cmake>=3.26" in said and "setuptools" in said


@pytest.mark.parametrize("where", ["pyproject.toml", "requirements/build/cuda.txt", "requirements/build",
                                   "requirements/common.txt"])
def test_a_link_in_the_cached_tree_is_refused_never_followed(tmp_path, source, where):
    vllm, outside = source
    if where == "requirements/common.txt":  # the link is the target of an include
        (vllm / "requirements" / "build" / "cuda.txt").write_text("-r ../common.txt\n")
    target = vllm / where
    if target.is_dir():
        for f in target.iterdir():
            f.unlink()
        target.rmdir()
        target.symlink_to(outside / "build")
    else:
        if target.exists():
            target.unlink()
        target.symlink_to(outside / "secret.txt")
    rc, text = dry_run(tmp_path)
    refused(rc, text, "symbolic link", where)
    assert CANARY not in text


@pytest.mark.parametrize("line", ["-r../common.txt", "-r\t../common.txt", "--requirement=../common.txt",
                                  "--requirement ../common.txt", "--requirem ../common.txt"])
def test_pips_include_forms_are_followed_as_pip_reads_them(tmp_path, source, line):
    vllm, _outside = source
    (vllm / "requirements" / "build" / "cuda.txt").write_text(f"cmake>=3.26\n{line}\n")
    (vllm / "requirements" / "common.txt").write_text("ninja>=1.11\n")
    rc, text = dry_run(tmp_path)
    assert rc == 0 and "Traceback" not in text, text[-3000:]
    assert "ninja>=1.11" in " ".join(text.split())  # not dropped with its include


@pytest.mark.parametrize(("line", "says"), [
    ("-e git+https://example.invalid/x.git#egg=x", "editable"),
    ("--editable=git+https://example.invalid/x.git#egg=x", "editable"),
    ("x @ git+https://example.invalid/x.git", "not from an index"),
    ("git+https://example.invalid/x.git", "a URL or a path"),
    ("./local/checkout", "a URL or a path"),
    ("-r /etc/passwd", "outside the source tree"),
    ("-r ../../../../etc/passwd", "outside the source tree"),
    ("-c https://example.invalid/c.txt", "outside the source tree"),
    ("x==${VERSION}", "environment variable"),
    ("--no-such-option", "pip cannot read"),
])
def test_what_the_template_cannot_install_is_refused_with_file_and_line(tmp_path, source, line, says):
    vllm, _outside = source
    (vllm / "requirements" / "build" / "cuda.txt").write_text(f"cmake>=3.26\n\n{line}\n")
    rc, text = dry_run(tmp_path)
    refused(rc, text, says, "requirements/build/cuda.txt line 3")


@pytest.mark.parametrize(("content", "says"), [
    ("x\n" * 60_000, "more than 2000 lines"),
    ("cmake  # " + "y" * (1 << 20) + "\n", "larger than"),
])
def test_a_huge_requirements_file_is_refused_before_any_table(tmp_path, source, content, says):
    vllm, _outside = source
    (vllm / "requirements" / "build" / "cuda.txt").write_text(content)
    rc, text = dry_run(tmp_path)
    refused(rc, text, says)


@pytest.mark.parametrize(("content", "says"), [
    ("[build-system\nrequires = [", "not valid TOML"),
    ("a = " + "[" * 20_000 + "]" * 20_000 + "\n", "nested"),
    ("\xff\xfe not text", "not valid TOML"),
])
def test_a_pyproject_that_is_not_toml_is_refused(tmp_path, source, content, says):
    vllm, _outside = source
    (vllm / "pyproject.toml").write_bytes(content.encode("latin-1") if content.startswith("\xff") else content.encode())
    rc, text = dry_run(tmp_path)
    refused(rc, text, says, "pyproject.toml")


# -- bundle install: a Python that lies, a wheel that is not one ---------------------------------

def _wheel(name: str = "tinything", version: str = "1.0") -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr(f"{name}/__init__.py", "VALUE = 1\n")
        z.writestr(f"{name}-{version}.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
        z.writestr(f"{name}-{version}.dist-info/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{name}-{version}.dist-info/RECORD", "")
    return buf.getvalue()


def _bundle(tmp_path: Path, wheel: bytes) -> Path:
    dl = tmp_path / "dl"
    dl.mkdir()
    (dl / "tinything-1.0-py3-none-any.whl").write_bytes(wheel)
    spec = tmp_path / "spec.toml"
    spec.write_text('name = "t"\nrequirements = ["tinything==1.0"]\npart_size_mb = 1\n')
    rc, text = cli("bundle", "make", spec, "--out", tmp_path / "b", "--downloaded", dl, cwd=tmp_path)
    assert rc == 0, text[-3000:]
    return tmp_path / "b"


def _python(tmp_path: Path, body: str) -> Path:
    py = tmp_path / "python3"
    py.write_text(f"#!/bin/sh\n{body}\n")
    py.chmod(0o755)
    return py


@pytest.mark.parametrize("body", [
    'echo "this is not a python at all"',
    'echo "x86_64 cpython three twelve"',
    'echo "x86_64 cpython \u0663 \u0661\u0662"',
    "yes 'flood flood flood flood flood flood flood flood'",
    'head -c 100000000 /dev/zero',
])
def test_a_python_that_answers_nonsense_or_floods_is_refused(tmp_path, body):
    out = _bundle(tmp_path, _wheel())
    rc, text = cli("bundle", "install", out, "--dest", tmp_path / "wh", "--site", tmp_path / "site",
                   "--python", _python(tmp_path, body), cwd=tmp_path, timeout=180)
    refused(rc, text, "--python")
    assert len(text) < 20_000  # the flood is not echoed
    assert not (tmp_path / "site").exists() or not any((tmp_path / "site").iterdir())


def test_a_locked_wheel_that_is_not_a_zip_is_refused_where_it_is_unpacked(tmp_path):
    import venv

    out = _bundle(tmp_path, b"PK\x03\x04 this is not a zip file at all" + b"\0" * 100)
    env = tmp_path / "nopip"
    venv.EnvBuilder(with_pip=False).create(env)  # no pip there: the wheels are unpacked by the tool
    rc, text = cli("bundle", "install", out, "--dest", tmp_path / "wh", "--site", tmp_path / "site",
                   "--python", env / "bin" / "python", cwd=tmp_path)
    refused(rc, text, "not a readable wheel", "tinything-1.0-py3-none-any.whl")


def test_a_wheel_member_that_leaves_the_site_is_refused(tmp_path):
    import venv

    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as z:
        z.writestr("tinything/__init__.py", "")
        z.writestr("../../escaped.py", f"{CANARY}\n")
    out = _bundle(tmp_path, buf.getvalue())
    env = tmp_path / "nopip"
    venv.EnvBuilder(with_pip=False).create(env)
    rc, text = cli("bundle", "install", out, "--dest", tmp_path / "wh", "--site", tmp_path / "s" / "site",
                   "--python", env / "bin" / "python", cwd=tmp_path)
    refused(rc, text, "would leave the folder")
    assert not (tmp_path / "escaped.py").exists() and not (tmp_path / "s" / "escaped.py").exists()
