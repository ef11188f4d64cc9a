"""Compile vLLM 0.33.0's NVFP4 SM12x GEMM translation unit for 12.1a, then audit the object.

    python benchmarks/audit_vllm_sm121a_compile.py \
        --cutlass .cache/cutlass-v4.7.0 --torch-wheel /work/.cache-wheels/torch-2.14.0-*.whl \
        --cublas-wheel /work/.cache-wheels/nvidia_cublas-13.1.1.3-*.whl \
        [--vllm-src .cache/sources/vllm-pypi-0.33.0] [--only patched|stock] [--out benchmarks/results]

The file is csrc/quantization/fp4/nvfp4_scaled_mm_sm120_kernels.cu. Its flags are the ones
vLLM 0.33.0's CMake gives the `_C_stable_libtorch` sources on CUDA 13 (CMakeLists.txt
"SM12x FP4 kernels", cmake/utils.cmake get_torch_gpu_compiler_flags and
set_gencode_flags_for_srcs): torch's COMMON_NVCC_FLAGS less the four -D__CUDA_NO_HALF*
defines removed for CUDA >= 12, -DENABLE_FP8, --compress-mode=size, -DENABLE_NVFP4_SM120=1,
-DENABLE_CUTLASS_MOE_SM120=1, TORCH_TARGET_VERSION, USE_CUDA, Py_LIMITED_API=3, C++17,
CMake's RelWithDebInfo -O2 -g -DNDEBUG (vLLM's setup.py default), and the one gencode that
differs:

- patched CMake (patches/vllm/0001-cmake-sm121a-on-cuda13.patch), TORCH_CUDA_ARCH_LIST=12.1a:
  "Building SM12x NVFP4 for archs: 12.1a" -> -gencode arch=compute_121a,code=sm_121a
- stock CMake, same list: "... archs: 12.0f" -> -gencode arch=compute_120f,code=sm_120f
  (configure logs: tests/fixtures/build/cmake/{patched,stock}-12.1a.log)

Each compile runs under `nice` and `/usr/bin/time -v` (peak RSS), one at a time (7 GB each),
then `harness audit OBJ --cc 12.1 --cc 12.0 --json` reads the object. The result table and
the audit verdicts are written to OUT/audit_vllm_sm121a_compile.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shlex
import subprocess
import sys
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TU = "csrc/quantization/fp4/nvfp4_scaled_mm_sm120_kernels.cu"
GENCODE = {
    "patched": ("12.1a", "arch=compute_121a,code=sm_121a", "sm_121a"),
    "stock": ("12.0f", "arch=compute_120f,code=sm_120f", "sm_120f"),
}
_TIME_RE = {
    "rss_kb": re.compile(r"Maximum resident set size \(kbytes\): (\d+)"),
    "wall": re.compile(r"Elapsed \(wall clock\) time \(h:mm:ss or m:ss\): ([\d:.]+)"),
    "user": re.compile(r"User time \(seconds\): ([\d.]+)"),
    "sys": re.compile(r"System time \(seconds\): ([\d.]+)"),
}


def extract(wheel: Path, prefix: str, dest: Path) -> Path:
    """The members of `wheel` under `prefix` (names checked: nothing lands outside `dest`)."""
    done = dest / ".complete"
    with zipfile.ZipFile(wheel) as zf:
        if not done.exists():
            for info in zf.infolist():
                name = info.filename
                if not name.startswith(prefix) or info.is_dir():
                    continue
                parts = Path(name).parts
                if ".." in parts or name.startswith("/"):
                    raise SystemExit(f"{wheel}: refusing member {name!r}")
                out = dest / name
                out.parent.mkdir(parents=True, exist_ok=True)
                with zf.open(info) as fin, open(out, "wb") as fout:
                    while chunk := fin.read(1 << 20):
                        fout.write(chunk)
            done.write_text(wheel.name)
    return dest / prefix


def torch_include(wheel: Path, dest: Path) -> tuple[Path, list[str]]:
    """torch/include/ out of the torch wheel, and its COMMON_NVCC_FLAGS."""
    inc = extract(wheel, "torch/include/", dest)
    with zipfile.ZipFile(wheel) as zf:
        src = zf.read("torch/utils/cpp_extension.py").decode()
    m = re.search(r"COMMON_NVCC_FLAGS = \[(.*?)\]", src, re.S)
    flags = re.findall(r"'([^']+)'", m[1]) if m else []
    return inc, flags


def nvcc_command(
    nvcc: str, vllm: Path, cutlass: Path, torch_inc: Path, torch_flags: list[str], cuda_inc: Path,
    gencode: str, out: Path,
) -> list[str]:
    dropped = {
        "-D__CUDA_NO_HALF_OPERATORS__",
        "-D__CUDA_NO_HALF_CONVERSIONS__",
        "-D__CUDA_NO_BFLOAT16_CONVERSIONS__",
        "-D__CUDA_NO_HALF2_OPERATORS__",
    }
    return [
        nvcc,
        "-DPy_LIMITED_API=3",
        "-DTORCH_TARGET_VERSION=0x020B000000000000ULL",
        "-DUSE_CUDA",
        "-D_C_stable_libtorch_EXPORTS",
        f"-I{vllm / 'csrc'}",
        "-isystem", str(cutlass / "include"),
        "-isystem", str(cutlass / "tools" / "util" / "include"),
        "-isystem", str(torch_inc),
        "-isystem", str(torch_inc / "torch" / "csrc" / "api" / "include"),
        "-isystem", str(cuda_inc),
        "-O2", "-g", "-DNDEBUG",
        "-std=c++17",
        "-Xcompiler=-fPIC",
        *[f for f in torch_flags if f not in dropped],
        "-DENABLE_FP8",
        "--compress-mode=size",
        "-DENABLE_NVFP4_SM120=1",
        "-DENABLE_CUTLASS_MOE_SM120=1",
        "-gencode", gencode,
        "-c", str(vllm / TU),
        "-o", str(out),
    ]


def compile_once(cmd: list[str], log: Path) -> dict:
    full = ["nice", "-n", "10", "/usr/bin/time", "-v", *cmd]
    print("+", shlex.join(full), flush=True)
    start = time.monotonic()
    proc = subprocess.run(full, capture_output=True, text=True)
    took = time.monotonic() - start
    log.write_text(f"$ {shlex.join(full)}\n\n{proc.stdout}\n{proc.stderr}")
    stats = {"rc": proc.returncode, "wall_s": round(took, 1)}
    for key, rx in _TIME_RE.items():
        m = rx.search(proc.stderr)
        if m:
            stats[key] = m[1]
    return stats


def audit(obj: Path) -> dict:
    cmd = [sys.executable, "-m", "harness", "audit", str(obj), "--cc", "12.1", "--cc", "12.0", "--json"]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    return {"rc": proc.returncode, "report": json.loads(proc.stdout) if proc.stdout.strip() else None,
            "stderr": proc.stderr.strip()}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vllm-src", type=Path, default=ROOT / ".cache/sources/vllm-pypi-0.33.0")
    ap.add_argument("--cutlass", type=Path, required=True, help="a CUTLASS tree (include/, tools/util/include/)")
    ap.add_argument("--torch-wheel", type=Path, required=True)
    ap.add_argument("--cublas-wheel", type=Path, required=True,
                    help="nvidia-cublas wheel: cublas_v2.h (csrc/torch_utils.h needs it; nvcc alone lacks it)")
    ap.add_argument("--nvcc", default="/usr/local/bin/nvcc")
    ap.add_argument("--only", choices=tuple(GENCODE))
    ap.add_argument("--reuse", action="store_true", help="audit objects compiled by an earlier run again")
    ap.add_argument("--work", type=Path, default=ROOT / ".cache/sm121a-compile")
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks/results")
    args = ap.parse_args()

    args.work.mkdir(parents=True, exist_ok=True)
    args.out.mkdir(parents=True, exist_ok=True)
    torch_inc, torch_flags = torch_include(args.torch_wheel, args.work / "torch-include")
    cuda_inc = extract(args.cublas_wheel, "nvidia/cu13/include/", args.work / "cublas-include")
    nvcc_version = subprocess.run([args.nvcc, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-1]
    rows, audits = [], {}
    for name in [args.only] if args.only else list(GENCODE):
        cmake_arch, gencode, expect = GENCODE[name]
        obj = args.work / f"nvfp4_scaled_mm_sm120_kernels.{name}.o"
        saved = obj.with_suffix(".stats.json")
        if args.reuse and obj.exists() and saved.exists():
            load, stats = json.loads(saved.read_text())  # the compile measured earlier
        else:
            load = os.getloadavg()
            stats = compile_once(
                nvcc_command(args.nvcc, args.vllm_src, args.cutlass, torch_inc, torch_flags, cuda_inc, gencode, obj),
                args.out / f"audit_vllm_sm121a_compile.{name}.log",
            )
            saved.write_text(json.dumps([load, stats]))
        result = audit(obj) if stats["rc"] == 0 else {"rc": None, "report": None, "stderr": "compile failed"}
        audits[name] = result
        rep = result["report"] or {}
        cubins = ",".join(f"{a}={n}" for a, n in rep.get("totals", {}).items()) or "-"
        sass = rep.get("nvfp4_sass", [])
        omma = sorted({op for r in sass for op in r["opcodes"]})
        native = sum(r["native_fp4_mma"] for r in sass)
        kernels = sum(r["kernels"] for r in sass)
        rows.append(
            f"| {name} | `{cmake_arch}` | `-gencode {gencode}` | {stats.get('wall_s')} | "
            f"{int(stats.get('rss_kb', 0)) / 2**20:.1f} | {load[0]:.1f} | {cubins} | "
            f"{native} of {kernels}: {', '.join(f'`{o}`' for o in omma) or 'none'} | "
            + "; ".join(f"{v['target']} {v['status']}" for v in rep.get("verdicts", []))
            + f" (exit {result['rc']}) |"
        )
        print(rows[-1], flush=True)
    lines = [
        "# vLLM 0.33.0 NVFP4 SM12x GEMM TU compiled for 12.1a (patched CMake) vs stock, then audited",
        "",
        f"Machine: {platform.node()} ({os.cpu_count()} CPUs, shared), {nvcc_version}; CUTLASS tree "
        f"{args.cutlass.name}; torch headers from {args.torch_wheel.name}. "
        f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        f"Command: `python benchmarks/audit_vllm_sm121a_compile.py --cutlass {args.cutlass} "
        f"--torch-wheel {args.torch_wheel} --cublas-wheel {args.cublas_wheel}`",
        "",
        "| build | CMake NVFP4 archs | gencode | nvcc wall s | peak RSS GiB | load avg at start | cubins | NVFP4 GEMM kernels with block-scaled FP4 MMA | audit verdicts |",
        "|---|---|---|---|---|---|---|---|---|",
        *rows,
        "",
        "Audit verdict messages:",
        "",
    ]
    for name, result in audits.items():
        for v in (result["report"] or {}).get("verdicts", []):
            lines.append(f"- {name}, {v['target']}: **{v['status']}**: {v['message']}")
    (args.out / "audit_vllm_sm121a_compile.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0 if all(r["rc"] is not None for r in audits.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
