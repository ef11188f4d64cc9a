"""The tool installs as a plain package (not editable) and works away from its checkout:
templates and data come through importlib.resources, nothing through the repository's paths."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

MATRIX = """
[matrix]
name = "installed"
hardware = "gpu"

[hardware.gpu]
cc = "12.1"
bandwidth_gbs = 273
memory_gib = 128

[stacks.s]
torch_cuda_arch_list = "12.1a"
base_image = { repository = "nvidia/cuda", tag = "13.0.1-devel-ubuntu24.04" }
torch = { version = "2.14.0" }
vllm = { pypi = "0.33.0" }
flashinfer = { version = "0.7.2.post1" }

[models.m]
checkpoint = "org/model"
quantization = "nvfp4"
active_params_b = 3
bytes_per_param = 0.5625

[configs.auto]
"""


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """The package built as a wheel from a copy of the sources and installed into a folder."""
    work = tmp_path_factory.mktemp("install")
    src = work / "src"
    anywhere = shutil.ignore_patterns(".git", ".venv", ".cache", "*.egg-info", "__pycache__",
                                      ".pytest_cache", ".ruff_cache", ".dev12", ".whl", "build", "dist")

    def ignore(folder: str, names: list[str]) -> set[str]:
        top = {"results", "tests", "examples"} if Path(folder) == ROOT else set()
        return anywhere(folder, names) | (top & set(names))

    shutil.copytree(ROOT, src, ignore=ignore)
    wheels = work / "wheels"
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
                        "-w", str(wheels), str(src)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    target = work / "site"
    wheel = next(wheels.glob("vllm_bw_harness-*.whl"))
    r = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                        str(target), str(wheel)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    return target


def _harness(site: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess:
    code = (f"import sys; sys.path.insert(0, {str(site)!r}); import harness; "
            f"assert harness.__file__.startswith({str(site)!r}), harness.__file__; "
            "from harness.cli import main; sys.exit(main(sys.argv[1:]))")
    return subprocess.run([sys.executable, "-c", code, *args], cwd=cwd, capture_output=True,
                          text=True, timeout=120)


def test_the_wheel_carries_templates_and_data(installed):
    for rel in ("harness/data/docker/Dockerfile.vllm.in", "harness/data/docker/fetch_source.py",
                "harness/data/kernel_names.toml", "harness/data/signatures.toml",
                "harness/probe_image.py"):
        assert (installed / rel).is_file(), rel
    # no test double ships in the product
    assert not list(installed.glob("harness/**/fakeserver.py"))


def test_installed_tool_reads_the_templates_it_carries(installed, tmp_path):
    """The templates come from the repository's docker/ into the wheel; the installed package
    reads its own copy, not a checkout's."""
    code = (f"import sys; sys.path.insert(0, {str(installed)!r}); "
            "from harness.image.render import DOCKER_DIR, DEFAULT_TEMPLATE; "
            "print(DOCKER_DIR); print(DEFAULT_TEMPLATE.read_text()[:200])")
    r = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    where, text = r.stdout.split("\n", 1)
    assert Path(where) == installed / "harness" / "data" / "docker", where
    assert text.removesuffix("\n") == (ROOT / "docker" / "Dockerfile.vllm.in").read_text()[:200]


def test_installed_tool_plans_and_dry_runs_away_from_the_checkout(installed, tmp_path, default_sources):
    matrix = tmp_path / "m.toml"
    matrix.write_text(MATRIX)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    r = _harness(installed, elsewhere, "--version")
    assert r.returncode == 0 and r.stdout.startswith("harness "), r.stderr
    r = _harness(installed, elsewhere, "plan", "-m", str(matrix), "--list")
    assert r.returncode == 0, r.stderr
    assert "s/m/auto" in r.stdout
    r = _harness(installed, elsewhere, "build", "--dry-run", "-m", str(matrix))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "vllm-bw:s-" in r.stdout  # the content-addressed tag, rendered from the packaged template


def test_version_imports_nothing_heavy():
    """`harness --version` answers before any heavy module is imported (the CLI is lazy)."""
    code = ("import sys; from harness.cli import main; main(['--version']); "
            "heavy = [m for m in ('rich', 'pydantic', 'docker', 'matplotlib', 'aiohttp') if m in sys.modules]; "
            "print('HEAVY', heavy)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "HEAVY []" in r.stdout, r.stdout


def test_one_command_imports_only_its_module():
    code = ("import sys; from harness.cli import build_parser; build_parser('fingerprint'); "
            "print('LOADED', sorted(m for m in sys.modules if m.startswith('harness.cli.')))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr
    assert "harness.cli.fingerprint" in r.stdout and "harness.cli.report" not in r.stdout
    assert "harness.cli.run" not in r.stdout, r.stdout


def test_every_cell_status_has_a_console_style():
    from harness.cli.run import STATUS_STYLE
    from harness.results.model import Status

    assert set(STATUS_STYLE) == set(Status)
