"""The pure-Python fatbin/cubin reader against real nvcc 13.0 binaries (tests/fixtures/cubins)."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from harness.archs import CudaArch
from harness.audit import elf, fatbin
from harness.audit.scan import NO_SASS, SassPolicy, ScanStats, audit_bytes, audit_tree
from harness.audit.source import BytesReader, Unreadable

CUBINS = Path(__file__).parent / "fixtures" / "cubins"
ALL_PTX = SassPolicy(all_ptx=True)

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
    audit = audit_bytes("x", (CUBINS / "mixed.so").read_bytes(), ALL_PTX, ScanStats())
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
    (tmp_path / "libc.so").write_text("/* GNU ld script */\nGROUP ( /lib/libc.so.6 )\n")
    (tmp_path / "host_only.so").write_bytes(b"\x7fELF" + b"\0" * 60)
    found = audit_tree(tmp_path, NO_SASS, ScanStats())
    assert [f.path for f in found.files] == ["kernels.o", "nvfp4_sm120f.so"]
    # A linker script is text, not a broken library; an ELF of an unknown class is unreadable.
    assert [u.path for u in found.unreadable] == ["host_only.so"]
    assert "32-bit or big-endian" in found.unreadable[0].reason


def test_wheel_is_read_without_extracting(tmp_path: Path) -> None:
    import zipfile

    whl = tmp_path / "fake-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as zf:
        zf.write(CUBINS / "nvfp4_sm120a.so", "fake/_C.abi3.so")
        zf.writestr("fake/__init__.py", "")
        zf.writestr("fake/libtext.so", "not elf")
    found = audit_tree(whl, NO_SASS, ScanStats())
    assert [f.path for f in found.files] == ["fake-1.0-py3-none-any.whl!fake/_C.abi3.so"]
    assert dict(found.files[0].cubins) == {"sm_120a": 2}
    # A member named like a library that is not one is reported, not skipped.
    assert [(u.path, u.reason[:13]) for u in found.unreadable] == [
        ("fake-1.0-py3-none-any.whl!fake/libtext.so", "not an ELF fi")
    ]


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
    assert [e.arch.name for e in fatbin.iter_entries(BytesReader(blob))] == [
        "sm_121a",
        "compute_90",
        "sm_100f",
    ]
    # A container whose size runs past the buffer is a truncated file, not fewer kernels.
    with pytest.raises(Unreadable, match="truncated: fatbin container at 0 declares"):
        list(fatbin.iter_entries(BytesReader(one[:-20])))


@pytest.mark.parametrize(
    ("name", "arch"),
    [("nvfp4_sm121a.cubin", "sm_121a"), ("nvfp4_sm120f.cubin", "sm_120f")],
)
def test_standalone_cubin_arch(name: str, arch: str) -> None:
    data = (CUBINS / name).read_bytes()
    hdr = elf.header(data[:64])
    assert hdr.machine == elf.EM_CUDA
    secs = elf.sections(BytesReader(data), hdr)
    assert elf.cubin_arch(data, hdr, secs) == CudaArch.parse(arch)
    assert "_Z21nvfp4_gemm_mma_kernelPKjPf" in elf.cubin_kernels(data, secs)
    assert len(elf.cubin_kernels(data, secs)) == 7
    # nvcc puts the section names first: the fast path finds the same kernels.
    table = elf.leading_name_table(data, hdr.ehsize)
    assert sorted(elf.kernel_names_from_table(table)) == sorted(elf.cubin_kernels(data, secs))


def test_leading_name_table_edges() -> None:
    """The leading name table ends at the first name that does not start with "." (padding
    NULs among names allowed); a table that runs past the bytes in hand is None (decode
    more), and so is a cubin without that layout."""
    head = b"\x7fELF" + b"\0" * 60
    names = b"\0.shstrtab\0.strtab\0\0\0.nv.info._Z3fooPf\0.text._Z3fooPf\0"
    table = elf.leading_name_table(head + names + b"_Z3fooPf\0rest", 64)
    assert table == names
    assert elf.kernel_names_from_table(table) == ["_Z3fooPf"]
    assert elf.leading_name_table(head + names, 64) is None  # ends with the prefix
    assert elf.leading_name_table(head + names + b".nv.info._Z3bar", 64) is None  # cut name
    assert elf.leading_name_table(head + names + b"_Z3foo", 64) is None  # cut symbol name
    assert elf.leading_name_table(head + b"\0.text\0" + names, 64) is None  # not nvcc's layout
    # A binary .symtab right after the names ends the table too.
    assert elf.leading_name_table(head + names + b"\x01\x02\0\0", 64) == names
