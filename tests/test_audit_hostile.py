"""Hostile input is data: truncations, bit flips, zip bombs, forged sizes and random bytes
give an "unreadable: <why>" entry and an incomplete audit (exit 2), never a traceback, a
MemoryError, a file written outside a temp dir, or a pass."""

from __future__ import annotations

import io
import random
import struct
import subprocess
import sys
import textwrap
import zipfile
import zlib
from pathlib import Path

import pytest

from harness.audit import fatbin
from harness.audit.report import audit_path
from harness.audit.source import MAX_MEMBER
from harness.cli import main

ROOT = Path(__file__).resolve().parent.parent
CUBINS = ROOT / "tests" / "fixtures" / "cubins"
WHEELS = ROOT / "tests" / "fixtures" / "wheels"
# Real binaries of every form: host .so (nvcc 13.0), object, bare cubins (nvcc and
# flashinfer-cubin 0.6.13), fatbin pieces of sgl-kernel 0.3.21 and vLLM 0.33.0 (zstd).
ELF_SAMPLES = [
    CUBINS / "nvfp4_sm120a.so",
    CUBINS / "mixed.so",
    CUBINS / "kernels.o",
    CUBINS / "nvfp4_sm121a.cubin",
    WHEELS / "fi_fmhaSm100a_noflags.cubin",
]
FATBIN_SAMPLES = [CUBINS / "kernels.fatbin", WHEELS / "vllm_C_sm120f_fp4_zstd.fatbin"]


def _offsets(n: int, count: int = 40) -> list[int]:
    """Truncation points: the headers' edges, then spread evenly over the file."""
    fixed = [0, 1, 3, 4, 8, 15, 16, 17, 63, 64, 65, 100, 1000]
    return sorted({o for o in fixed + [n * i // count for i in range(1, count)] if 0 <= o < n})


def _audit(tmp_path: Path, name: str, data: bytes):
    path = tmp_path / name
    path.write_bytes(data)
    return audit_path(path, sass_check=False)


@pytest.mark.parametrize("sample", ELF_SAMPLES, ids=lambda p: p.name)
def test_every_truncation_of_an_elf_is_unreadable(tmp_path: Path, sample: Path) -> None:
    data = sample.read_bytes()
    full = audit_path(sample, sass_check=False)
    assert full.complete and full.files
    for cut in _offsets(len(data)):
        report = _audit(tmp_path, sample.name, data[:cut])
        # The section table sits at the end: cut anywhere, the file cannot be read to the end.
        assert not report.complete, (cut, report.files)
        assert report.status == "incomplete"
        assert not report.files  # nothing half-read is counted


@pytest.mark.parametrize("sample", FATBIN_SAMPLES, ids=lambda p: p.name)
def test_truncated_fatbin_never_passes_with_a_wrong_arch(tmp_path: Path, sample: Path) -> None:
    data = sample.read_bytes()
    full = [o.arch.name for f in audit_path(sample, sass_check=False).files for o in f.objects]
    for cut in _offsets(len(data)):
        report = _audit(tmp_path, sample.name, data[:cut])
        got = [o.arch.name for f in report.files for o in f.objects]
        # A .fatbin file has no overall size: cut between containers it holds fewer entries;
        # cut inside one, it is unreadable. Never an entry that was not there.
        assert not report.complete or got == full[: len(got)], (cut, got)
        assert report.complete or not got


@pytest.mark.parametrize("sample", ELF_SAMPLES + FATBIN_SAMPLES, ids=lambda p: p.name)
def test_bit_flips_are_data(tmp_path: Path, sample: Path) -> None:
    data = sample.read_bytes()
    rng = random.Random(sample.name)
    for _ in range(60):
        buf = bytearray(data)
        for _ in range(rng.choice((1, 4, 32))):
            pos = rng.randrange(len(buf))
            buf[pos] ^= 1 << rng.randrange(8)
        report = _audit(tmp_path, sample.name, bytes(buf))  # must not raise
        assert report.complete or report.unreadable[0].reason


@pytest.mark.parametrize("suffix", [".so", ".cubin", ".o", ".fatbin", ".whl", ".so.12", ".a"])
def test_random_bytes_are_unreadable(tmp_path: Path, suffix: str) -> None:
    rng = random.Random(suffix)
    for size in (0, 1, 7, 8, 16, 64, 65, 4096, 100_000):
        report = _audit(tmp_path, "junk" + suffix, rng.randbytes(size))
        assert not report.complete, (suffix, size)
        assert report.status == "incomplete"


def _zstd_bomb(declared: int) -> bytes:
    """A 17-byte zstd frame that declares `declared` bytes (single segment, 8-byte size)."""
    block = (1 | (1 << 1) | (1000 << 3)).to_bytes(3, "little")  # last, RLE, 1000 bytes
    return b"\x28\xb5\x2f\xfd" + b"\xe0" + struct.pack("<Q", declared) + block + b"\x00"


def _fatbin_entry(payload: bytes, flags: int, usize: int, arch: int = 120, kind: int = 2) -> bytes:
    header = struct.pack(
        "<HHIQIIHHIIIQQQ", kind, 0x101, 64, len(payload), 0, 0, 8, 1, arch, 0, 0, flags, 0, usize
    )
    body = header + payload
    return fatbin.MAGIC + struct.pack("<Q", len(body)) + body


@pytest.mark.parametrize("declared", [64 << 30, 1 << 30, 300 << 20])
def test_zstd_frame_declaring_gigabytes_is_refused_before_allocating(tmp_path: Path, declared: int) -> None:
    blob = _fatbin_entry(_zstd_bomb(declared), fatbin.FLAG_COMPRESS_ZSTD | 0x11, declared)
    assert len(blob) < 160
    report = _audit(tmp_path, "bomb.fatbin", blob)
    (u,) = report.unreadable
    assert f"declares {declared} bytes" in u.reason and "cap" in u.reason


def test_eight_byte_fatbin(tmp_path: Path) -> None:
    report = _audit(tmp_path, "x.fatbin", fatbin.MAGIC)
    assert [u.reason for u in report.unreadable] == ["truncated fatbin container header at 0"]


def test_entry_with_a_forged_arch_number(tmp_path: Path) -> None:
    report = _audit(tmp_path, "x.fatbin", _fatbin_entry(b"\0" * 16, 0x11, 16, arch=7777))
    assert "not a CUDA arch" in report.unreadable[0].reason


def _wheel(entries: list[tuple[str, bytes]], compression: int = zipfile.ZIP_DEFLATED) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", compression) as zf:
        for name, data in entries:
            zf.writestr(name, data)
    return buf.getvalue()


def test_bad_crc_in_a_stored_member(tmp_path: Path) -> None:
    so = (CUBINS / "nvfp4_sm120a.so").read_bytes()
    raw = bytearray(_wheel([("pkg/_C.abi3.so", so)], zipfile.ZIP_STORED))
    at = raw.find(so[1000:1016])
    raw[at] ^= 0xFF  # a byte of data changed, CRC left as it was
    report = _audit(tmp_path, "pkg-1.0-py3-none-any.whl", bytes(raw))
    (u,) = report.unreadable
    assert "CRC mismatch" in u.reason


def test_corrupt_deflate_member(tmp_path: Path) -> None:
    so = (CUBINS / "mixed.so").read_bytes()
    raw = bytearray(_wheel([("pkg/_C.abi3.so", so)]))
    start = raw.find(b"pkg/_C.abi3.so") + len("pkg/_C.abi3.so")
    for i in range(start + 200, start + 260):
        raw[i] ^= 0x5A
    report = _audit(tmp_path, "pkg-1.0-py3-none-any.whl", bytes(raw))
    (u,) = report.unreadable
    assert any(w in u.reason for w in ("CRC", "corrupt deflate", "inflates", "not an ELF"))


def test_truncated_wheel_and_non_zip_wheel(tmp_path: Path) -> None:
    whl = _wheel([("pkg/_C.abi3.so", (CUBINS / "nvfp4_sm120a.so").read_bytes())])
    for data in (whl[: len(whl) // 2], b"definitely not a zip file"):
        report = _audit(tmp_path, "pkg-1.0-py3-none-any.whl", data)
        (u,) = report.unreadable
        assert "not a readable zip archive" in u.reason


def _patch_sizes(raw: bytes, name: bytes, declared: int) -> bytes:
    """Set the uncompressed size of `name` in its local and central headers."""
    out = bytearray(raw)
    for sig, size_at, name_at in ((b"PK\x03\x04", 22, 30), (b"PK\x01\x02", 24, 46)):
        pos = out.find(sig)
        while pos >= 0:
            if out[pos + name_at : pos + name_at + len(name)] == name:
                struct.pack_into("<I", out, pos + size_at, declared)
            pos = out.find(sig, pos + 4)
    return bytes(out)


def test_zip_member_declaring_a_huge_size_is_a_bomb(tmp_path: Path) -> None:
    raw = _patch_sizes(_wheel([("pkg/_C.abi3.so", b"\x7fELF" + b"\0" * 5000)]), b"pkg/_C.abi3.so", 0xF0000000)
    report = _audit(tmp_path, "pkg-1.0-py3-none-any.whl", raw)
    (u,) = report.unreadable
    assert "zip bomb" in u.reason


def test_member_over_the_cap(tmp_path: Path) -> None:
    from harness.audit.source import Member, Unreadable, check_member

    m = Member("w.whl", "x.so", 0, zipfile.ZIP_DEFLATED, MAX_MEMBER, MAX_MEMBER + 1, 0, 0)
    with pytest.raises(Unreadable, match="over the 4 GiB cap"):
        check_member(m)


def test_overlapping_members_are_refused(tmp_path: Path) -> None:
    so = (CUBINS / "nvfp4_sm120a.so").read_bytes()
    raw = bytearray(_wheel([("a/x.so", so), ("b/y.so", so)]))
    # Point the second central-directory entry at the first member's data.
    first = raw.find(b"PK\x01\x02")
    second = raw.find(b"PK\x01\x02", first + 4)
    struct.pack_into("<I", raw, second + 42, struct.unpack_from("<I", raw, first + 42)[0])
    report = _audit(tmp_path, "pkg-1.0-py3-none-any.whl", bytes(raw))
    assert any("overlaps" in u.reason for u in report.unreadable)


def test_a_real_zip_bomb_is_read_in_bounded_memory(tmp_path: Path) -> None:
    """400 MB of zeros behind an ELF header whose section table sits at the end: the member
    must be inflated to the end, in a process limited to 1 GiB of address space."""
    size = 400 << 20
    head = bytearray(64)
    head[:6] = b"\x7fELF\x02\x01"
    struct.pack_into("<HHIQQQIHHHHHH", head, 16, 3, 62, 1, 0, 0, size - 64 * 2, 0, 64, 0, 0, 64, 2, 1)
    comp = zlib.compressobj(1, zlib.DEFLATED, -15)
    body = comp.compress(bytes(head)) + comp.compress(bytes(size - 64)) + comp.flush()
    crc = zlib.crc32(bytes(size - 64), zlib.crc32(bytes(head)))
    whl = tmp_path / "bomb-1.0-py3-none-any.whl"
    # The zip is written by hand around the pre-compressed body (zipfile would compress again).
    name = b"bomb/_C.abi3.so"
    local = struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, 8, 0, 0, crc, len(body), size, len(name), 0) + name
    central = struct.pack(
        "<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20, 20, 0, 8, 0, 0, crc, len(body), size, len(name), 0, 0, 0, 0, 0, 0
    ) + name
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 1, 1, len(central), len(local) + len(body), 0)
    whl.write_bytes(local + body + central + end)
    script = textwrap.dedent(
        f"""
        import resource, sys
        resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
        from harness.audit.report import audit_path
        r = audit_path({str(whl)!r}, sass_check=False, jobs=1)
        print(r.unreadable[0].reason if r.unreadable else "complete")
        """
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT,
                          env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "MemoryError" not in proc.stderr
    # Streamed to the end (the section table is the last 128 bytes): a complete audit.
    assert proc.stdout.strip() == "complete", proc.stdout


def test_member_names_never_reach_a_path_or_the_terminal(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    so = (CUBINS / "nvfp4_sm120a.so").read_bytes()
    evil = ["../../escaped.so", "/tmp/absolute_escape.so", "[red]x[/red]\x1b[31mred\x07.so"]
    whl = tmp_path / "work" / "evil-1.0-py3-none-any.whl"
    whl.parent.mkdir()
    whl.write_bytes(_wheel([(n, so) for n in evil]))
    rc = main(["audit", str(whl), "--no-sass"])
    out = capsys.readouterr()
    assert rc == 0
    assert not (tmp_path / "escaped.so").exists() and not Path("/tmp/absolute_escape.so").exists()
    assert sorted(p.name for p in tmp_path.rglob("*")) == ["evil-1.0-py3-none-any.whl", "work"]
    text = out.out + out.err
    assert "\x1b[31mred" not in text and "\x07" not in text
    assert "[red]x[/red]?[31mred?.so" in text.replace("\n", "")  # shown literally, not as markup


def test_a_broken_container_outside_the_fatbin_sections_is_not_counted(tmp_path: Path) -> None:
    """Fatbin magic in host code (.text here) is not device code: read as a file (sections
    first) or as a wheel member (stream, sections last), the library reads the same."""
    from harness.audit import elf
    from harness.audit.source import BytesReader

    data = bytearray((CUBINS / "nvfp4_sm120a.so").read_bytes())
    text = next(s for s in elf.sections(BytesReader(bytes(data)), elf.header(bytes(data[:64]))) if s.name == ".text")
    data[text.offset : text.offset + 24] = fatbin.MAGIC + struct.pack("<Q", 1 << 40) + b"\0" * 8
    whole = _audit(tmp_path, "lib.so", bytes(data))
    streamed = _audit(tmp_path, "pkg-1.0-py3-none-any.whl", _wheel([("pkg/lib.so", bytes(data))]))
    for report in (whole, streamed):
        assert report.complete, report.unreadable
        assert dict(report.files[0].cubins) == {"sm_120a": 2}


def test_zlib_fallback_reads_the_same(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Without ISA-L the stdlib's zlib inflates the same members with the same checks."""
    from harness.audit import source

    so = (CUBINS / "mixed.so").read_bytes()
    whl = tmp_path / "pkg-1.0-py3-none-any.whl"
    whl.write_bytes(_wheel([("pkg/_C.abi3.so", so), ("pkg/half.so", so[: len(so) // 2])]))
    fast = audit_path(whl, sass_check=False, jobs=1)
    monkeypatch.setattr(source, "_igzip", None)
    slow = audit_path(whl, sass_check=False, jobs=1)
    assert [dict(f.cubins) for f in fast.files] == [dict(f.cubins) for f in slow.files] != []
    assert [u.path for u in slow.unreadable] == [u.path for u in fast.unreadable] == [
        "pkg-1.0-py3-none-any.whl!pkg/half.so"
    ]


@pytest.mark.parametrize("inflater", ["isal", "zlib"])
@pytest.mark.parametrize("method", [zipfile.ZIP_DEFLATED, zipfile.ZIP_STORED])
def test_stream_gives_every_byte_through_a_reused_input_buffer(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, inflater: str, method: int
) -> None:
    """Compressed bytes are read into one reused buffer; the inflater keeps what it has not
    consumed. With reads and outputs far smaller than the member (hundreds of each), the
    stream still gives the member's exact bytes, and a cut member still fails its checks."""
    import random

    from harness.audit import source

    rng = random.Random(14)
    words = [bytes(rng.randrange(256) for _ in range(rng.randrange(4, 40))) for _ in range(300)]
    data = b"".join(rng.choice(words) for _ in range(60_000))  # ~1.3 MB, ~4:1 in deflate
    whl = tmp_path / "pkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w", compression=method) as zf:
        zf.writestr("pkg/blob.so", data)
    monkeypatch.setattr(source, "IN_CHUNK", 4096)
    monkeypatch.setattr(source, "CHUNK", 16384)
    if inflater == "zlib":
        monkeypatch.setattr(source, "_igzip", None)
    with zipfile.ZipFile(whl) as zf:
        info = zf.getinfo("pkg/blob.so")
    member = source.member_of(str(whl), info)
    chunks = list(source.member_chunks(member))
    assert len(chunks) >= len(data) // 16384
    assert max(map(len, chunks)) <= 16384 + 1  # one byte over the cap: how overflow is seen
    assert b"".join(chunks) == data
    cut = source.Member(**{**member.__dict__, "compress_size": member.compress_size // 2})
    with pytest.raises(source.Unreadable, match="truncated|CRC"):
        list(source.member_chunks(cut))
