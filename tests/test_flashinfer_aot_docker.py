"""FlashInfer 0.7.2.post1's AOT modules where FlashInfer loads them, on a real engine with nvcc 13.0.

In the CUDA toolchain image (harness-test/toolchain:cu130, tools/toolchain-base.sh): FlashInfer
installed from its PyPI sdist, its AOT step (FlashInfer's own `flashinfer.aot.main()`, through
examples/flashinfer-aot/aot_timed.py) run for 12.1a on the two smallest real modules of its
list (`silu_and_mul`: one CUDA source; `spdlog`: C++ only), then docker/flashinfer_aot_check.py
as the image runs it: `place`, `check`. The check must pass, and must fail, naming the module,
when one is missing, misplaced (flat in data/aot), or not a loadable module; and over the whole
AOT list it must name every module this partial build lacks. The placed module is audited: sm_121a.

Differences from the image's FlashInfer step (docker/Dockerfile.vllm.in): FlashInfer is installed
with --no-deps (the few wheels `import flashinfer` needs come from PyPI beforehand) and without its
optional NIXL-EP build (BUILD_NIXL_EP=0); the AOT step compiles two modules, not the ~560 of its
list (hours on two cores).
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from harness.image import render, sources
from harness.matrix.load import load_matrix

pytestmark = [pytest.mark.docker, pytest.mark.nvcc, pytest.mark.slow, pytest.mark.network]

ROOT = Path(__file__).resolve().parent.parent
BASE = "harness-test/toolchain:cu130"
ARCH = "12.1a"
ONLY = ("silu_and_mul", "spdlog")
# what `import flashinfer` needs beyond the toolchain image (FlashInfer 0.7.2.post1 requirements.txt)
DEPS = ("requests", "click", "einops", "tabulate", "tqdm", "numpy", "nvidia-ml-py")
CHECK = "python /opt/build/flashinfer_aot_check.py"
SITE = "/opt/torch/.venv/lib/python3.11/site-packages"
AOT_DIR = f"{SITE}/flashinfer/data/aot"


def docker(*args: str, check: bool = True, timeout: int = 3600) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=check, timeout=timeout)


@pytest.fixture(scope="module")
def image(tmp_path_factory, pinned_sources):
    from harness.engine import connect

    if connect(timeout=30).image_id(BASE) is None:
        why = (f"{BASE} is missing: `make test-toolchain` builds it (an 8.6 GB image); "
               "HARNESS_TOOLCHAIN=1 makes `make test` build it too")
        if os.environ.get("HARNESS_REQUIRE_TOOLCHAIN") == "1":
            pytest.fail(why)
        pytest.skip(why)
    stack = load_matrix(ROOT / "matrix" / "spark.toml").spec.stacks["spark-121a"]
    sdist = pinned_sources.sdist(sources.flashinfer_source(stack))  # the matrix's pin, sha256-checked
    ctx = tmp_path_factory.mktemp("ctx")
    wheels = ctx / "w"
    subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--only-binary=:all:", "--python-version", "311",
                    "--implementation", "cp", "--platform", "manylinux_2_28_x86_64", "--platform",
                    "manylinux2014_x86_64", "--platform", "manylinux_2_17_x86_64", "-d", str(wheels), *DEPS],
                   check=True, capture_output=True, timeout=900)
    files = {"fi.tar.gz": sdist.read_bytes(),
             "flashinfer_aot_check.py": (ROOT / "docker" / "flashinfer_aot_check.py").read_bytes(),
             "h/examples/flashinfer-aot/aot_timed.py": (ROOT / "examples" / "flashinfer-aot" / "aot_timed.py").read_bytes(),
             "h/tools/flashinfer_aot_plan.py": (ROOT / "tools" / "flashinfer_aot_plan.py").read_bytes()}
    files |= {f"w/{p.name}": p.read_bytes() for p in sorted(wheels.iterdir())}
    dockerfile = f"""FROM {BASE}
COPY fi.tar.gz /opt/build/fi.tar.gz
COPY w /opt/build/w
RUN python -m pip install -q --no-index --find-links /opt/build/w /opt/build/w/*.whl \\
 && mkdir -p /opt/build/src && tar xzf /opt/build/fi.tar.gz -C /opt/build/src \\
 && mv /opt/build/src/flashinfer_python-0.7.2.post1 /opt/build/src/flashinfer && cd /opt/build/src/flashinfer \\
 && BUILD_NIXL_EP=0 python -m pip install --no-build-isolation --no-deps --no-index -v . > /opt/build/flashinfer-build.log 2>&1
COPY flashinfer_aot_check.py /opt/build/flashinfer_aot_check.py
COPY h /opt/build/h
RUN cd /opt/build/src/flashinfer && export FLASHINFER_CUDA_ARCH_LIST={ARCH} \\
 && MAX_JOBS=2 python /opt/build/h/examples/flashinfer-aot/aot_timed.py --log /opt/build/aot-log --only {' '.join(ONLY)} \\
      -- --out-dir {render.FLASHINFER_AOT_OUT} --build-dir {render.FLASHINFER_AOT_OUT}-build \\
 && rm -rf {render.FLASHINFER_AOT_OUT}-build \\
 && cd / && {CHECK} place {render.FLASHINFER_AOT_OUT} && {CHECK} check --only {' '.join(ONLY)}
ENV FLASHINFER_CUDA_ARCH_LIST={ARCH}
"""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        for name, data in [("Dockerfile", dockerfile.encode()), *files.items()]:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    tag = f"harness-test/flashinfer-aot:{hashlib.sha256(buf.getvalue()).hexdigest()[:12]}"
    (ctx / "ctx.tar").write_bytes(buf.getvalue())
    built = subprocess.run(["docker", "build", "--force-rm", "--label", "harness.test=flashinfer-aot",
                            "-t", tag, "-"], stdin=(ctx / "ctx.tar").open("rb"), capture_output=True, text=True,
                           timeout=3 * 3600)
    try:
        assert built.returncode == 0, built.stdout[-4000:] + built.stderr[-2000:]
        yield tag, built.stdout
    finally:
        docker("rmi", "-f", tag, check=False)


def run(tag: str, script: str) -> subprocess.CompletedProcess:
    return docker("run", "--rm", "--label", "harness.test=flashinfer-aot", tag, "bash", "-c", script, check=False)


def test_place_then_check_passes_on_a_real_aot_build(image, tmp_path):
    tag, build_log = image
    assert f"flashinfer_aot_check: placed {len(ONLY)} modules in {AOT_DIR}" in build_log
    assert (f"flashinfer_aot_check: {len(ONLY)} modules of the AOT step ({ARCH}) resolve to "
            f"{AOT_DIR}/<name>/<name>.so and load with JIT disabled") in build_log
    # FlashInfer's layout, nothing else, and the AOT step's own folders gone
    out = run(tag, f"cd {AOT_DIR} && find . | sort && ls /opt/build")
    assert out.returncode == 0, out.stderr
    listing = out.stdout.split()
    assert [x for x in listing if x.startswith(".")] == [".", *sorted(
        p for n in ONLY for p in (f"./{n}", f"./{n}/{n}.so"))]
    assert "flashinfer-aot" not in listing and "flashinfer-aot-build" not in listing
    # the timing files of the AOT run: both modules compiled, each in its family, all steps exit 0
    events = run(tag, "cat /opt/build/aot-log/events.tsv").stdout.splitlines()
    rows = [dict(zip(events[0].split("\t"), line.split("\t"), strict=True)) for line in events[1:]]
    assert [(r["step"], r["family"], r["modules"], r["cuda_sources"], r["exit"]) for r in rows] == [
        ("generate", "-", "2", "1", "0"), ("build", "sampling_norm", "1", "1", "0"),
        ("build", "other", "1", "0", "0"), ("aot", "-", "0", "0", "0")], rows
    # the placed module holds sm_121a code: the harness's own audit of the file
    out = docker("run", "--rm", "--label", "harness.test=flashinfer-aot", "-v", f"{tmp_path}:/out", tag,
                 "cp", f"{AOT_DIR}/silu_and_mul/silu_and_mul.so", "/out/", check=False)
    assert out.returncode == 0, out.stderr
    audit = subprocess.run([sys.executable, "-m", "harness", "audit", str(tmp_path / "silu_and_mul.so"), "--json"],
                           capture_output=True, text=True, timeout=600, cwd=ROOT,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert audit.returncode == 0, audit.stderr[-2000:]
    assert "sm_121a" in json.dumps(json.loads(audit.stdout)), audit.stdout[:2000]


@pytest.mark.parametrize(("name", "change", "said"), [
    ("missing", f"rm -r {AOT_DIR}/silu_and_mul",
     "silu_and_mul: FlashInfer resolves it to nothing, not"),
    ("misplaced", f"mv {AOT_DIR}/silu_and_mul/silu_and_mul.so {AOT_DIR}/silu_and_mul.so && rmdir {AOT_DIR}/silu_and_mul",
     f"a file of that name is at {AOT_DIR}/silu_and_mul.so"),
    # a shared object dlopen refuses (a library it needs is gone): FlashInfer would fall back to JIT
    ("not loadable", "echo 'int f(void){return 0;}' > /tmp/g.c && cc -shared -fPIC -o /tmp/libgone.so /tmp/g.c"
     f" && cc -shared -fPIC -o {AOT_DIR}/silu_and_mul/silu_and_mul.so /tmp/g.c -L/tmp -Wl,--no-as-needed -lgone"
     " && rm /tmp/libgone.so",
     "silu_and_mul: with JIT disabled, build_and_load() raised MissingJITCacheError"),
    # cut short: dlopen maps past its end and the process dies of SIGBUS (a served one would too)
    ("truncated", f"f={AOT_DIR}/silu_and_mul/silu_and_mul.so; head -c 8192 $f > /tmp/x && cp /tmp/x $f",
     "silu_and_mul: loading it killed the process (signal 7)"),
    # a shared object that is no FlashInfer module (TVM FFI loads it all the same)
    ("not a module", f"cp /usr/lib/x86_64-linux-gnu/libz.so.1 {AOT_DIR}/silu_and_mul/silu_and_mul.so",
     "silu_and_mul.so exports no TVM FFI function"),
])
def test_check_fails_naming_the_module(image, name, change, said):
    tag, _ = image
    out = run(tag, f"set -e; {change}; cd / && {CHECK} check --only {' '.join(ONLY)}")
    assert out.returncode == 1, (name, out.stdout, out.stderr[-3000:])
    assert "flashinfer_aot_check: FAILED" in out.stderr and said in out.stderr, (name, out.stderr[-3000:])
    assert "spdlog:" not in out.stderr  # the intact module is not blamed


def test_check_of_the_whole_list_names_what_this_partial_build_lacks(image):
    tag, _ = image
    out = run(tag, f"cd / && {CHECK} check --no-load")
    assert out.returncode == 1, out.stdout
    lacking = [ln for ln in out.stderr.splitlines() if "resolves it to nothing" in ln]
    # FlashInfer 0.7.2.post1 lists 564 modules for 12.1a (tools/flashinfer_aot_plan.py); two are here
    assert len(lacking) == 562, (len(lacking), out.stderr[-2000:])
    assert any(ln.strip().startswith("- fused_moe_120:") for ln in lacking)
    assert not any(f"- {n}:" in ln for n in ONLY for ln in lacking)
