"""examples/h200-cache (the compile cache measured on the H200 machine), as far as this machine
reaches without the GPU host: its three matrices load and differ from h200-source.toml by
exactly the patch the measurement is about, `harness build --dry-run` of each renders and
applies its whole patch series to the real vLLM 0.25.1 sdist (PyPI, sha256 checked, through the
`pinned_sources` fixture), the
changed kernel source is one the cut build compiles (the H200 build's own log), and the script
parses and answers a bad verb."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support.builds import one

from harness.cli.build import dry_run
from harness.image import offline
from harness.image.dockerfile import render
from harness.matrix.load import load_matrix

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "examples" / "h200-cache" / "device.sh"
ONE_LINE = "vllm/0003-vllm-0.25.1-test-oneline-permute-cols.patch"
VARIANTS = {"h200-source": "src-0251", "h200-source-oneline": "src-0251", "h200-source-stock": "src-0251-stock"}


def _patches(name: str) -> list[str]:
    matrix = load_matrix(ROOT / "matrix" / f"{name}.toml")
    return [p.path for p in matrix.spec.stacks[VARIANTS[name]].vllm.patches]


def test_the_variants_differ_by_the_measured_patch_alone():
    cold, one, stock = (_patches(n) for n in VARIANTS)
    assert one == [*cold, ONE_LINE]
    assert stock == [p for p in cold if not Path(p).name.startswith("0001-")] and len(stock) == len(cold) - 1
    specs = {n: load_matrix(ROOT / "matrix" / f"{n}.toml").spec.stacks[s].model_dump(exclude={"vllm", "description"})
             for n, s in VARIANTS.items()}
    assert specs["h200-source"] == specs["h200-source-oneline"] == specs["h200-source-stock"]


def test_the_changed_line_is_in_a_kernel_the_cut_build_compiles():
    text = (ROOT / "patches" / ONE_LINE).read_text()
    changed = [line for line in text.splitlines() if line[:1] in "+-" and not line.startswith(("+++", "---"))]
    assert len(changed) == 2 and "//" not in "".join(changed)  # one line, not a comment
    assert "+++ b/csrc/libtorch_stable/permute_cols.cu" in text
    log = gzip.decompress((ROOT / "examples" / "h200-source" / "device" / "vllm-build.log.gz").read_bytes()).decode()
    assert "Building CUDA object CMakeFiles/_C_stable_libtorch.dir/csrc/libtorch_stable/permute_cols.cu.o" in log


@pytest.mark.network
def test_dry_run_of_each_variant_renders_and_applies_its_series(tmp_path, monkeypatch, capsys, pinned_sources):
    # the two sdists the stacks pin, from the suite's one download (never from what another test
    # happened to leave in the cache: tests/support/caches.py)
    pinned_sources.tree("vllm", "0.25.1")
    pinned_sources.tree("flashinfer-python", "0.6.13")
    monkeypatch.setattr(offline, "OFFLINE", tmp_path / "cache")
    pin = offline.load_table("0.25.1").pins[0]
    offline.fetch(pin, from_dir=ROOT / "tests" / "fixtures" / "offline", cache=offline.OFFLINE)
    hashes = {}
    for name, stack in VARIANTS.items():
        # the dependency wheelhouse exists only on the H200 host; everything else as committed
        text = (ROOT / "matrix" / f"{name}.toml").read_text().replace('deps_wheelhouse = "/tmp/deps-wheelhouse"', "")
        path = ROOT / "matrix" / f".test-cache-{name}-{os.getpid()}.toml"  # patches resolve from matrix/
        path.write_text(text)
        try:
            matrix = load_matrix(path)
            assert dry_run(matrix, [stack], None) == 0
            hashes[name] = render(one(matrix, stack)).content_hash
        finally:
            path.unlink()
        shown = capsys.readouterr().out
        for patch in _patches(name):
            assert Path(patch).name in shown, (name, patch, shown)
    assert len(set(hashes.values())) == 3  # three images: the compile step runs for each


def test_the_script_parses_and_refuses_a_bad_verb(tmp_path):
    subprocess.run(["bash", "-n", str(SCRIPT)], check=True)
    bad = subprocess.run(["bash", str(SCRIPT), "nope"], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "OUT": str(tmp_path / "out")}, timeout=30)
    assert bad.returncode == 2 and "usage: device.sh prep" in bad.stdout
    visit = ROOT / "examples" / "h200-cache" / "visit.sh"
    subprocess.run(["bash", "-n", str(visit)], check=True)
    bad = subprocess.run(["bash", str(visit), "nope"], capture_output=True, text=True, cwd=ROOT,
                         env={**os.environ, "OUT": str(tmp_path / "out")}, timeout=30)
    assert bad.returncode == 2 and "usage: visit.sh in1" in bad.stdout


def test_gather_joins_a_file_sent_in_pieces_only_when_its_digest_checks(tmp_path):
    import hashlib

    data = os.urandom(300_000)
    one, two, dst = tmp_path / "one" / "kit", tmp_path / "two" / "kit", tmp_path / "inputs"
    one.mkdir(parents=True)
    two.mkdir(parents=True)
    (one / "kit.tar.xz.part-aa").write_bytes(data[:200_000])
    (one / "kit.tar.xz.sha256").write_text(f"{hashlib.sha256(data).hexdigest()}  kit.tar.xz\n")
    (two / "kit.tar.xz.part-ab").write_bytes(data[200_000:])
    gather = ["bash", str(ROOT / "examples" / "h200-cache" / "gather.sh")]
    env = {**os.environ, "INPUTS": str(dst)}
    first = subprocess.run([*gather, str(one.parent)], capture_output=True, text=True, env=env, check=True)
    assert "1 piece(s) so far" in first.stdout and not (dst / "kit" / "kit.tar.xz").exists()
    subprocess.run([*gather, str(two.parent)], capture_output=True, text=True, env=env, check=True)
    assert (dst / "kit" / "kit.tar.xz").read_bytes() == data and not list((dst / "kit").glob("*.part-*"))
    # a piece that is not the sent one: never joined
    (dst / "kit" / "kit.tar.xz").unlink()
    (one / "kit.tar.xz.part-aa").write_bytes(b"x" * 200_000)
    subprocess.run([*gather, str(one.parent)], capture_output=True, text=True, env=env, check=True)
    bad = subprocess.run([*gather, str(two.parent)], capture_output=True, text=True, env=env, check=True)
    assert "not whole yet" in bad.stdout and not (dst / "kit" / "kit.tar.xz").exists()


def test_stock_twin_differs_in_arch_flags_alone_and_the_analysis_scripts_read_their_inputs(tmp_path):
    # the two configures of the cut 0.25.1 stack (tools/configure-targets.sh COMMANDS=1, committed
    # compressed): the stock twin compiles 48 of the 113 objects differently, in their arch flags
    # alone (12.0f where the patched stack has 12.1a): no cache keyed by the command can share them
    d = ROOT / "examples" / "h200-cache" / "stock-vs-patched"
    out = subprocess.run([sys.executable, str(ROOT / "examples" / "h200-cache" / "differ.py"),
                          str(d / "patched" / "commands.json.gz"), str(d / "stock" / "commands.json.gz")],
                         capture_output=True, text=True, check=True).stdout
    assert out.startswith("113 objects in both, 0 in one only; 48 compiled differently, 0 of them in more")
    assert out == (d / "differ.md").read_text()
    # units.py: a rebuild's compiled units (the record's compile_cache.missed) against a cold ninja log
    (tmp_path / "ninja").write_text("# ninja log v5\n0\t20000\t0\tCMakeFiles/_C.dir/csrc/a.cu.o\t1\n"
                                    "0\t30000\t0\tCMakeFiles/_C.dir/csrc/q/b.cu.o\t2\n0\t9000\t0\t_C.so\t3\n")
    (tmp_path / "rec.json").write_text('{"compile_cache": {"missed": ["csrc/q/b.cu", "/elsewhere/z.cu"]}}')
    text = subprocess.run([sys.executable, str(ROOT / "examples" / "h200-cache" / "units.py"),
                           str(tmp_path / "ninja"), str(tmp_path / "rec.json")],
                          capture_output=True, text=True, check=True).stdout
    assert "| `csrc/q/b.cu` | 30.0 |" in text and "`/elsewhere/z.cu` | (no such object" in text
    assert text.rstrip().endswith("the 1 compiled again: 30 step-seconds = 60 % of the cold compile")
