"""Check the audit's two shortcuts against the long way, on real wheels.

    python benchmarks/audit_crosscheck.py --arch FLASHINFER_CUBIN.whl [--sample 500] \
        --names VLLM.whl SGL_KERNEL.whl BITSANDBYTES.whl

--arch: every bare cubin of the wheel is named by the audit (e_flags, .nv.compat, tkinfo);
a random sample (seeded), half of it drawn from the cubins whose a-suffix lives only in
e_flags (fmhaSm10xa / sm103a / MxE2m1 batched GEMMs), is also named by `cuobjdump --list-elf`
and compared (cuobjdump never prints f, so sm_100f must read sm_100 there).
--names: for every cubin in every `.nv_fatbin` / `__nv_relfatbin` of the wheels' libraries,
the kernel names the audit reads (from the leading name table: the first blocks of a zstd
cubin, the first bytes of a plain one) against those of a
full decode and section-table parse.
"""

from __future__ import annotations

import argparse
import collections
import random
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.audit import elf, fatbin, tools, zstd  # noqa: E402
from harness.audit.scan import _entry_kernels, _plain_kernels, audit_bytes  # noqa: E402
from harness.audit.source import BytesReader, Reader, View  # noqa: E402


def check_arch(wheel: Path, sample: int) -> int:
    cuobjdump = str(tools.require("cuobjdump"))
    with zipfile.ZipFile(wheel) as zf:
        infos = [i for i in zf.infolist() if i.filename.endswith(".cubin")]
        names = collections.Counter()
        for i in infos:
            names[audit_bytes("x", zf.read(i)).objects[0].arch.name] += 1
        print(f"{wheel.name}: {len(infos)} cubins, audit names {dict(sorted(names.items()))}")
        rng = random.Random(14)
        hard = [i for i in infos if any(k in i.filename for k in ("fmhaSm10", "sm103a", "MxE2m1"))]
        pick = rng.sample(hard, min(sample // 2, len(hard))) + rng.sample(infos, min(sample - sample // 2, len(infos)))
        bad = []
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "k.cubin"
            for i in pick:
                data = zf.read(i)
                path.write_bytes(data)
                listed = subprocess.run([cuobjdump, "--list-elf", str(path)], capture_output=True, text=True).stdout
                theirs = listed.strip().rsplit(".", 2)[-2]
                ours = audit_bytes("x", data).objects[0].arch.name
                if ours.removesuffix("f") != theirs and ours != theirs:
                    bad.append((i.filename, ours, theirs))
    print(f"arch vs cuobjdump --list-elf: {len(pick) - len(bad)} of {len(pick)} agree")
    for b in bad[:20]:
        print("  MISMATCH", b)
    return len(bad)


def check_names(wheels: list[Path]) -> int:
    stat: collections.Counter[str] = collections.Counter()
    for wheel in wheels:
        with tempfile.TemporaryDirectory() as tmp, zipfile.ZipFile(wheel) as zf:
            for n, name in enumerate(x for x in zf.namelist() if ".so" in Path(x).name):
                path = Path(tmp) / f"{n}.so"
                with zf.open(name) as src, open(path, "wb") as dst:
                    while chunk := src.read(1 << 20):
                        dst.write(chunk)
                r = Reader(path)
                try:
                    head = r.read_at(0, 64)
                    if not elf.is_elf(head):
                        continue
                    for s in elf.sections(r, elf.header(head)):
                        if s.name not in elf.FATBIN_SECTIONS:
                            continue
                        for e in fatbin.iter_entries(r, s.offset, s.end):
                            if e.arch.ptx or e.compression == "lz":
                                continue
                            stored = r.read_at(e.offset, e.stored_size)
                            fast = (
                                _plain_kernels(View(r, e.offset, e.stored_size))
                                if e.compression == "none"
                                else _entry_kernels(stored, e)
                            )
                            data = zstd.decompress(stored, e.uncompressed_size) if e.compression == "zstd" else stored
                            secs = elf.sections(BytesReader(data), elf.header(data[:64]))
                            full = [x.name[9:] for x in secs if x.name.startswith(".nv.info.") and len(x.name) > 9]
                            stat[f"{e.compression} cubins"] += 1
                            if sorted(fast) == sorted(full):
                                stat["same"] += 1
                            else:
                                stat["DIFFERENT"] += 1
                                print("  MISMATCH", wheel.name, name, e.arch, len(fast), len(full))
                finally:
                    r.close()
    print(f"kernel names, audit vs full section-table parse: {dict(stat)}")
    return stat["DIFFERENT"]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", type=Path)
    ap.add_argument("--sample", type=int, default=500)
    ap.add_argument("--names", type=Path, nargs="*", default=[])
    args = ap.parse_args()
    bad = 0
    if args.arch:
        bad += check_arch(args.arch, args.sample)
    if args.names:
        bad += check_names(args.names)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
