"""Which matrix `make matrix` runs on the hardware found (`harness doctor --pick-matrix`), and
doctor's checks of the pins and of the matrix against the GPU. GPU probes are made up here
(harness.gpus.Gpu records, as NVML would fill them); the mapping is a pure function."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from harness import gpus, lock
from harness.cli import doctor, main
from harness.gpus import Gpu, GpuProbe
from harness.matrix.load import load_matrix

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = frozenset({"spark.toml", "rtx-pro-6000.toml", "h200-local.toml", "generic.toml"})


def gpu(name: str, cc: str, mem: float = 80.0, index: int = 0) -> Gpu:
    return Gpu(index, name, cc, mem, "580.95.05", "13.0")


@pytest.mark.parametrize("found, available, path, why", [
    ((), SHIPPED, "matrix/spark.toml", "no NVIDIA GPU here"),
    ((gpu("NVIDIA GB10", "12.1", 0.0),), SHIPPED, "matrix/spark.toml", "DGX Spark class (SM 12.1)"),
    ((gpu("NVIDIA RTX PRO 6000 Blackwell Workstation Edition", "12.0", 95.6),), SHIPPED,
     "matrix/rtx-pro-6000.toml", "SM 12.0"),
    ((gpu("NVIDIA GeForce RTX 5090", "12.0", 31.8),), SHIPPED, "matrix/rtx-pro-6000.toml", "SM 12.0"),
    ((gpu("NVIDIA H200", "9.0", 140.4),), SHIPPED, "matrix/h200-local.toml", "a local-install Hopper matrix"),
    ((gpu("NVIDIA H200", "9.0", 140.4),), SHIPPED | {"h200-docker.toml"}, "matrix/h200-docker.toml",
     "a docker Hopper matrix"),
    ((gpu("NVIDIA H100 80GB HBM3", "9.0"),), SHIPPED, "matrix/h200-local.toml", "Hopper"),
    ((gpu("NVIDIA GH200 480GB", "9.0", 95.0),), SHIPPED, "matrix/h200-local.toml", "Hopper"),
    ((gpu("NVIDIA L40S", "8.9", 44.5),), SHIPPED, "matrix/generated/generic-sm89.toml",
     "current vLLM release built for cc 8.9"),
    ((gpu("NVIDIA A100-SXM4-80GB", "8.0"),), SHIPPED, "matrix/generated/generic-sm80.toml", "cc 8.0"),
    ((gpu("NVIDIA B200", "10.0", 179.0),), SHIPPED, "matrix/generated/generic-sm100.toml", "cc 10.0"),
    ((gpu("NVIDIA GB10", "12.1", 0.0), gpu("NVIDIA GB10", "12.1", 0.0, 1)), SHIPPED, "matrix/spark.toml",
     "GPU 0 of 2"),
])
def test_the_matrix_for_the_hardware_found(found, available, path, why):
    pick = doctor.pick_matrix(found, available)
    assert pick.path == path
    assert why in pick.why
    assert (pick.generic_cc is not None) == path.startswith("matrix/generated/")


@pytest.mark.parametrize("name, cc, arch, bandwidth", [
    ("NVIDIA L40S", "8.9", "8.9", 864),
    ("NVIDIA A100-SXM4-80GB", "8.0", "8.0", 2039),
    ("NVIDIA B200", "10.0", "10.0a", 8000),
    ("NVIDIA Some Future Card", "8.6", "8.6", None),
])
def test_the_generic_matrix_is_written_for_the_gpu(tmp_path, name, cc, arch, bandwidth):
    dest = tmp_path / "matrix" / "generated" / "x.toml"
    doctor.write_generic(gpu(name, cc, 44.5), dest, ROOT / "matrix" / "generic.toml")
    m = load_matrix(dest)  # a valid matrix, loaded like any other
    hw = m.spec.hardware[m.spec.matrix.hardware]
    assert hw.cc == cc and m.spec.matrix.hardware == f"sm{cc.replace('.', '')}"
    for stack in m.spec.stacks.values():
        assert str(stack.torch_cuda_arch_list) == arch == str(stack.flashinfer_cuda_arch_list)
        assert stack.torch_cuda_arch_list.runs_on(cc)  # the arch list it writes runs on the GPU found
    if bandwidth is None:  # no made-up figure passes silently: the profile says it is a placeholder
        assert "placeholder" in hw.description and "bandwidth_gbs" in hw.description
    else:
        assert hw.bandwidth_gbs == bandwidth and "placeholder" not in hw.description


def test_pick_matrix_command_prints_the_path_and_why(tmp_path, monkeypatch, capsys):
    (tmp_path / "matrix").mkdir()
    shutil.copy(ROOT / "matrix" / "generic.toml", tmp_path / "matrix" / "generic.toml")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(doctor.gpus, "probe", lambda: GpuProbe((gpu("NVIDIA L4", "8.9", 22.5),), "nvml", ""))
    assert main(["doctor", "--pick-matrix"]) == 0
    captured = capsys.readouterr()
    assert captured.out == "matrix/generated/generic-sm89.toml\n"  # what the Makefile reads
    assert "NVIDIA L4, cc 8.9" in captured.err
    assert load_matrix(tmp_path / "matrix" / "generated" / "generic-sm89.toml").spec.hardware["sm89"].bandwidth_gbs == 300


def test_pick_matrix_without_a_gpu_is_the_default(monkeypatch, capsys):
    monkeypatch.setattr(doctor.gpus, "probe", lambda: GpuProbe((), "none", "NVML: not here"))
    assert main(["doctor", "--pick-matrix"]) == 0
    assert capsys.readouterr().out == "matrix/spark.toml\n"


# --- doctor's checks of a matrix -------------------------------------------------------------------


def _copy_spark(tmp_path: Path) -> Path:
    """The shipped spark matrix in a repository of its own (patches may not leave a repository)."""
    import shutil

    (tmp_path / ".git").mkdir()
    shutil.copytree(ROOT / "patches", tmp_path / "patches")
    (tmp_path / "matrix").mkdir()
    dest = tmp_path / "matrix" / "spark.toml"
    shutil.copy(ROOT / "matrix" / "spark.toml", dest)
    return dest


def test_unpinned_without_a_lock_is_a_warning_naming_the_fix(tmp_path):
    check = doctor.pins_check(load_matrix(_copy_spark(tmp_path)))
    assert not check.ok and not check.required  # `harness run` locks first
    assert "nvidia/cuda:13.0.1-devel-ubuntu24.04" in check.detail
    assert check.fix.startswith("`harness lock -m ")


def test_a_stale_lock_fails_doctor(tmp_path):
    m = load_matrix(_copy_spark(tmp_path))
    pins = {w.stack: {} for w in lock.wants(m)}
    for w in lock.wants(m):
        pins[w.stack][w.key] = (
            lock.LockedImage(reference="nvidia/cuda:12.9.0-devel-ubuntu24.04", digest="sha256:" + "c" * 64,
                             source="engine", locked="2026-12-01T00:00:00Z") if w.kind == "image" else
            lock.LockedFile(project=w.project, version=w.version, kind=w.kind, file="f", sha256=w.given,
                            source="matrix", locked="2026-12-01T00:00:00Z"))
    meta = lock.LockMeta(matrix="spark.toml", written="2026-12-01T00:00:00Z", tool="harness test")
    lock.write_lock(lock.LockFile(lock=meta, stacks=pins), tmp_path / "matrix" / "spark.lock")
    check = doctor.pins_check(m)
    assert not check.ok and check.required
    assert "the matrix asks for nvidia/cuda:13.0.1-devel-ubuntu24.04; the lock pinned nvidia/cuda:12.9.0" \
        in check.detail


def test_a_matrix_for_another_gpu_is_named_with_the_one_that_fits():
    m = load_matrix(ROOT / "matrix" / "spark.toml")
    probe = GpuProbe((gpu("NVIDIA H200", "9.0", 140.4),), "nvml", "")
    check = doctor.fit_check(m, probe)
    assert not check.ok and not check.required
    assert "cc 12.1" in check.detail and "NVIDIA H200 cc 9.0" in check.detail
    assert "matrix/h200-" in check.fix


def test_no_engine_reads_as_a_sentence_with_the_fix(monkeypatch, tmp_path):
    monkeypatch.setenv("DOCKER_HOST", f"unix://{tmp_path}/no.sock")
    checks = {c.name: c for c in doctor.run_checks(probe=GpuProbe((), "none", "test"))}
    engine = checks["docker engine"]
    assert not engine.ok
    assert engine.detail == f"no Docker engine answers at unix://{tmp_path}/no.sock: its socket does not " \
        "exist (no dockerd is running)"
    assert "make docker-up" in engine.fix


def test_a_card_of_the_same_cc_but_another_bandwidth_is_named_not_passed():
    """Seen on a visit: the H200 matrix run on an H100 VM. cc 9.0 for both, so the matrix runs,
    but its roofline figures would use the H200's 4800 GB/s: doctor says so (a warning)."""
    m = load_matrix(ROOT / "matrix" / "h200-docker.toml")
    h100 = GpuProbe((gpu("NVIDIA H100 80GB HBM3", "9.0", 79.6),), "nvml", "")
    check = doctor.fit_check(m, h100)
    assert not check.ok and not check.required
    assert "reads 3350 GB/s, not the 4800 GB/s of hardware.h200" in check.detail
    assert "bandwidth_gbs = 3350" in check.fix
    h200 = GpuProbe((gpu("NVIDIA H200", "9.0", 140.4),), "nvml", "")
    assert doctor.fit_check(m, h200).ok
    unknown = GpuProbe((gpu("NVIDIA Hopper engineering sample", "9.0", 96.0),), "nvml", "")
    assert doctor.fit_check(m, unknown).ok  # nothing known to compare: the cc decides
    assert gpus.known_bandwidth("NVIDIA H20") == 4000 and gpus.known_bandwidth("NVIDIA H200 NVL") == 4800
