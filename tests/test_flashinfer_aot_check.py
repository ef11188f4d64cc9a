"""docker/flashinfer_aot_check.py without an engine: `place` on fake layouts, the TVM FFI export
reader on real shared objects made here with the C compiler, and the image template running the
same place-and-check commands. The check against FlashInfer itself, on a real AOT build, is
tests/test_flashinfer_aot_docker.py."""

from __future__ import annotations

import importlib.util
import shutil
import subprocess
from pathlib import Path

import pytest
from support.builds import one

from harness.image import render
from harness.matrix.load import load_matrix

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("flashinfer_aot_check", ROOT / "docker" / "flashinfer_aot_check.py")
assert spec and spec.loader
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)


@pytest.fixture
def aot(tmp_path, monkeypatch):
    dest = tmp_path / "site" / "flashinfer" / "data" / "aot"
    monkeypatch.setattr(check, "aot_dir", lambda: dest)
    return dest


def module(root: Path, name: str, data: bytes = b"\x7fELF") -> None:
    (root / name).mkdir(parents=True)
    (root / name / f"{name}.so").write_bytes(data)


def test_place_moves_each_module_into_flashinfers_layout(tmp_path, aot, capsys):
    src = tmp_path / "out"
    module(src, "norm")
    module(src, "sampling")
    assert check.place(src) == 0
    assert sorted(str(p.relative_to(aot)) for p in aot.rglob("*")) == [
        "norm", "norm/norm.so", "sampling", "sampling/sampling.so"]
    assert not src.exists()  # moved, not copied: one copy in the image
    assert f"placed 2 modules in {aot}" in capsys.readouterr().out


@pytest.mark.parametrize(("make", "said"), [
    (lambda s: (s / "norm.so").write_bytes(b"x"), "not <name>/<name>.so"),            # flat
    (lambda s: module(s, "norm") or (s / "norm" / "extra.txt").write_text("x"), "not <name>/<name>.so"),
    (lambda s: (s / "norm").mkdir() or (s / "norm" / "other.so").write_bytes(b"x"), "not <name>/<name>.so"),
    (lambda s: None, "no module in it"),
])
def test_place_refuses_what_flashinfer_would_never_load(tmp_path, aot, capsys, make, said):
    src = tmp_path / "out"
    src.mkdir()
    make(src)
    assert check.place(src) == 1
    err = capsys.readouterr().err
    assert "FAILED" in err and said in err
    assert not aot.exists()  # nothing half-placed


def test_place_refuses_to_mix_two_builds(tmp_path, aot, capsys):
    module(aot, "norm")
    src = tmp_path / "out"
    module(src, "sampling")
    assert check.place(src) == 1 and "already holds files" in capsys.readouterr().err
    assert (src / "sampling" / "sampling.so").exists()


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler here")
def test_tvm_ffi_exports_reads_the_defined_dynamic_symbols(tmp_path):
    c = tmp_path / "m.c"
    c.write_text("int __tvm_ffi_silu_and_mul(void){return 0;}\n"
                 "int __tvm_ffi_set_log_level(void){return 1;}\n"
                 "int __tvm_ffi__library_ctx = 3;\n"  # TVM FFI's own symbol, not a function
                 "extern int __tvm_ffi_elsewhere(void);\n"  # undefined here
                 "int use(void){return __tvm_ffi_elsewhere();}\n")
    so = tmp_path / "m.so"
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(so), str(c)], check=True)
    assert check.tvm_ffi_exports(so) == ["set_log_level", "silu_and_mul"]
    plain = tmp_path / "plain.so"
    c.write_text("int f(void){return 0;}\n")
    subprocess.run(["cc", "-shared", "-fPIC", "-o", str(plain), str(c)], check=True)
    assert check.tvm_ffi_exports(plain) == []
    (tmp_path / "text.so").write_text("not an ELF file")
    assert check.tvm_ffi_exports(tmp_path / "text.so") == []


def test_the_image_template_runs_the_aot_step_then_place_and_check():
    text = render.DEFAULT_TEMPLATE.read_text()
    assert "COPY flashinfer_aot_check.py /opt/build/flashinfer_aot_check.py" in text
    rendered = render.render_source(one(load_matrix(ROOT / "matrix" / "spark.toml"), "spark-121a"), requirements=False)
    dockerfile = rendered.dockerfile
    step = dockerfile[dockerfile.index("RUN cd /opt/build/src/flashinfer"):dockerfile.index("FROM flashinfer AS vllm")]
    # the stack's arch list for the AOT step and the check alike; the build folder gone in the same step
    assert 'export FLASHINFER_CUDA_ARCH_LIST="${FLASHINFER_CUDA_ARCH_LIST}"' in step
    assert rendered.buildargs["FLASHINFER_CUDA_ARCH_LIST"] == "12.1a"
    order = ["python -m flashinfer.aot --out-dir /opt/build/flashinfer-aot --build-dir /opt/build/flashinfer-aot-build",
             "rm -rf /opt/build/flashinfer-aot-build",
             "cd / && python /opt/build/flashinfer_aot_check.py place /opt/build/flashinfer-aot",
             "python /opt/build/flashinfer_aot_check.py check 2>&1"]
    at = [step.index(s) for s in order]
    assert at == sorted(at), step
    assert ("flashinfer_aot_check.py", (ROOT / "docker" / "flashinfer_aot_check.py").read_bytes()) in rendered.files
    # a stack without AOT kernels has no step to check
    m = load_matrix(ROOT / "matrix" / "spark.toml")
    stack = m.spec.stacks["spark-121a"]
    assert stack.flashinfer is not None
    m.spec.stacks["spark-121a"] = stack.model_copy(
        update={"flashinfer": stack.flashinfer.model_copy(update={"aot": False})})
    jit_only = render.render_source(one(m, "spark-121a"), requirements=False).dockerfile
    assert "flashinfer_aot_check.py place" not in jit_only and "python -m flashinfer.aot" not in jit_only
