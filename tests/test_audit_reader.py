"""The pure-Python fatbin/cubin reader against real nvcc 13.0 binaries (tests/fixtures/cubins)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from harness.audit import elf, fatbin
from harness.audit.archs import CudaArch
from harness.audit.scan import ScanStats, audit_bytes, audit_tree

CUBINS = Path(__file__).parent / "fixtures" / "cubins"
NO_SASS = lambda arch: False  # noqa: E731

# Every entry in file order, as `cuobjdump -ptx FILE` names it (PTX renamed compute_*).
# The .so files carry a second, kernel-less cubin per arch: nvcc's device-link stub.
ENTRIES = {
    "kernels.fatbin": ["sm_120a", "sm_120f", "compute_90"],
    "kernels.o": ["sm_121a", "sm_90"],
    "mixed.so": [
        "sm_75",
        "sm_90",
        "sm_120",
        "compute_80",
        "sm_90a",
        "sm_100f",
        "compute_120f",
        "sm_120f",
        "sm_121a",
    ],
    "nvfp4_sm120_ptx.so": ["sm_120", "compute_120", "sm_120"],
    "nvfp4_sm120a.so": ["sm_120a", "sm_120a"],
    "nvfp4_sm120a_sm121a.so": ["sm_120a", "sm_121a", "sm_120a", "sm_121a"],
    "nvfp4_sm120f.so": ["sm_120f", "sm_120f"],
    # Standalone cubins: cuobjdump says sm_120 for the family build; ptxas' recorded
    # command line (.note.nv.tkinfo) keeps the f, so we report it.
    "nvfp4_sm120f.cubin": ["sm_120f"],
    "nvfp4_sm121a.cubin": ["sm_121a"],
}
KERNEL_FAMILIES = {
    "nvfp4_gemm": 1,
    "fp4_quant": 1,
    "moe": 1,
    "scaled_mm": 1,
    "marlin": 1,
    "attention": 1,
    "other": 1,
}


@pytest.mark.parametrize(("name", "expected"), sorted(ENTRIES.items()))
def test_entries_named_like_cuobjdump(name: str, expected: list[str]) -> None:
    data = (CUBINS / name).read_bytes()
    audit = audit_bytes(name, data, NO_SASS, ScanStats())
    assert audit is not None
    assert [o.arch.name for o in audit.objects] == expected


@pytest.mark.parametrize(
    ("name", "cubins", "ptx"),
    [
        (
            "mixed.so",
            {
                "sm_75": 1,
                "sm_90": 1,
                "sm_90a": 1,
                "sm_100f": 1,
                "sm_120": 1,
                "sm_120f": 1,
                "sm_121a": 1,
            },
            ["compute_80", "compute_120f"],
        ),
        ("nvfp4_sm120_ptx.so", {"sm_120": 2}, ["compute_120"]),
        ("kernels.fatbin", {"sm_120a": 1, "sm_120f": 1}, ["compute_90"]),
    ],
)
def test_counts_and_ptx(name: str, cubins: dict[str, int], ptx: list[str]) -> None:
    audit = audit_bytes(name, (CUBINS / name).read_bytes(), NO_SASS, ScanStats())
    assert dict(audit.cubins) == cubins
    assert audit.ptx == ptx


def test_every_kernel_build_has_one_kernel_per_family() -> None:
    audit = audit_bytes("x", (CUBINS / "mixed.so").read_bytes(), NO_SASS, ScanStats())
    for obj in audit.objects:
        if obj.arch.name == "sm_75":
            assert obj.families == {}  # the device-link stub
        else:
            assert obj.families == KERNEL_FAMILIES, obj.arch
            # Mangled inside namespace plain / special (the two translation units).
            assert obj.arch.ptx or (
                len(obj.fp4_kernels) == 1 and "nvfp4_gemm_mma_kernel" in obj.fp4_kernels[0]
            )


def test_directory_walk_finds_every_binary_once(tmp_path: Path) -> None:
    for name in ("nvfp4_sm120f.so", "kernels.o"):
        (tmp_path / name).write_bytes((CUBINS / name).read_bytes())
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "libdup.so").symlink_to(tmp_path / "nvfp4_sm120f.so")
    (tmp_path / "README.txt").write_text("not a binary")
    (tmp_path / "host_only.so").write_bytes(b"\x7fELF" + b"\0" * 60)
    files = audit_tree(tmp_path, NO_SASS, ScanStats())
    assert [f.path for f in files] == ["kernels.o", "nvfp4_sm120f.so"]


def test_wheel_is_read_without_extracting(tmp_path: Path) -> None:
    import zipfile

    whl = tmp_path / "fake-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as zf:
        zf.write(CUBINS / "nvfp4_sm120a.so", "fake/_C.abi3.so")
        zf.writestr("fake/__init__.py", "")
        zf.writestr("fake/libtext.so", "not elf")
    files = audit_tree(whl, NO_SASS, ScanStats())
    assert [f.path for f in files] == ["fake-1.0-py3-none-any.whl!fake/_C.abi3.so"]
    assert dict(files[0].cubins) == {"sm_120a": 2}


@pytest.mark.parametrize(
    ("flags", "kind", "expected"),
    [
        (0x1000011, fatbin.KIND_ELF, "sm_120"),
        (0x1100011, fatbin.KIND_ELF, "sm_120a"),
        (0x1200011, fatbin.KIND_ELF, "sm_120f"),
        (0x0108011, fatbin.KIND_ELF, "sm_120a"),  # zstd-compressed, as in the vLLM wheel
        (0x0208011, fatbin.KIND_PTX, "compute_120f"),
        (0x0008011, fatbin.KIND_PTX, "compute_120"),
    ],
)
def test_suffix_comes_from_entry_flags(flags: int, kind: int, expected: str) -> None:
    assert fatbin.arch_from_header(kind, 120, flags).name == expected


def _container(entries: list[tuple[int, int, int, bytes]]) -> bytes:
    body = b""
    for kind, arch, flags, payload in entries:
        header = struct.pack(
            "<HHIQIIHHIIIQQQ",
            kind,
            0x101,
            64,
            len(payload),
            0,
            0,
            8,
            1,
            arch,
            0,
            0,
            flags,
            0,
            len(payload),
        )
        body += header + payload
    return fatbin.MAGIC + struct.pack("<Q", len(body)) + body


def test_containers_found_among_padding_and_truncation_is_safe() -> None:
    one = _container([(2, 121, 0x100011, b"\0" * 16), (1, 90, 0x11, b"ptx\0" * 4)])
    two = _container([(2, 100, 0x200011, b"\0" * 8)])
    blob = b"\0" * 13 + one + b"\0" * 7 + two
    assert [e.arch.name for e in fatbin.iter_entries(blob)] == ["sm_121a", "compute_90", "sm_100f"]
    # A container whose size runs past the buffer yields what fits and stops cleanly.
    assert [e.arch.name for e in fatbin.iter_entries(one[:-20])] == ["sm_121a"]


@pytest.mark.parametrize(
    ("name", "arch"),
    [("nvfp4_sm121a.cubin", "sm_121a"), ("nvfp4_sm120f.cubin", "sm_120f")],
)
def test_standalone_cubin_arch(name: str, arch: str) -> None:
    data = (CUBINS / name).read_bytes()
    parsed = elf.parse(data)
    assert parsed is not None and parsed.machine == elf.EM_CUDA
    assert elf.cubin_arch(data, parsed) == CudaArch.parse(arch)
    assert "_Z21nvfp4_gemm_mma_kernelPKjPf" in elf.kernel_names(parsed)
    assert len(elf.kernel_names(parsed)) == 7
