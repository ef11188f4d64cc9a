"""What `python -m flashinfer.aot` compiles for an arch list, and what FlashInfer loads at run time.

usage: python tools/flashinfer_aot_plan.py --source FLASHINFER_TREE --arch-list 12.1a [--arch-list 12.0a]
           [--runtime-cc 12.1 --runtime-cc 12.0] [--sdist FILE] [--label TEXT] --out RECORD.json

Everything is FlashInfer's own code, read from its source tree (an sdist unpacked; the tree the
image's AOT step runs from), no GPU needed:
- the modules: `flashinfer.aot.gen_all_modules` with the AOT step's default configuration and
  `detect_sm_capabilities()` under FLASHINFER_CUDA_ARCH_LIST, as `python -m flashinfer.aot` does;
- the nvcc arch flags of each module: the build.ninja FlashInfer writes for it (`write_ninja`),
  every `-gencode` it holds, the per-source overrides included;
- what a chip loads at run time: the getters FlashInfer's serving APIs call (fp4_quantize, the
  CUTLASS fused MoE, the SM12x FP4 GEMM, sampling, norm), called with the chip's compute
  capability under FLASHINFER_DISABLE_JIT=1, with no AOT module installed: FlashInfer then raises
  MissingJITCacheError carrying the JitSpec it would load or compile (jit/core.py
  build_and_load), which names the module and its flags. The run-time context is the one
  FlashInfer derives from a device of that capability (CompilationContext._normalize_cuda_arch),
  given to it as FLASHINFER_CUDA_ARCH_LIST.

The record is the evidence of an upstream report (`harness bug --flashinfer-plan`) and the module
list the device measurement (examples/flashinfer-aot/) orders and times. Each arch list and each
chip runs in a fresh Python (FlashInfer reads its arch list once, at import). The probes need a
CUDA build of torch (the fp4 getter reads torch.version.cuda); with a CPU build they are recorded
as not run. nvcc must be on PATH or in CUDA_HOME (FlashInfer asks it for its version).

The kernel families below order the device measurement (serving path first) and group the record;
a module no rule names is `other`, so the families always partition the list.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

# (family, pattern on the module name, on an FP8/NVFP4 MoE model's serving path). First match wins;
# the order is the order the device measurement compiles them in.
FAMILIES: tuple[tuple[str, str, bool], ...] = (
    ("gemm_sm12x", r"fp4_gemm_cutlass_sm\d+|cute_sm12x_gemm|gemm_sm120|mxfp8_gemm_cutlass_sm120", True),
    ("fp4_quantize", r"fp4_quantization_\w+", True),
    ("fused_moe_cutlass", r"fused_moe_\d+\w*", True),
    ("fused_moe_trtllm", r"fused_moe_trtllm\w*|trtllm_gen_fused_moe\w*|trtllm_routing\w*", True),
    ("attention_fa2_hd128", r"batch_(?:prefill|decode)_with_kv_cache_\w*_head_dim_qk_128_\w*", True),
    ("sampling_norm", r"sampling|cake_sampling_\w+|norm|rope|topk|page|quantization|cascade"
                      r"|(?:silu|gelu|gelu_tanh)_and_mul", True),
    ("attention_fa2", r"batch_(?:prefill|decode)_with_kv_cache_\w+", False),
    ("attention_other", r"batch_attention_with_kv_cache_\w+|batch_prefill_with_attention_sink_\w+"
                        r"|batch_mla_attention_\w+|\w*sparse_mla\w*|nvfp4_attention_sm120|trtllm_fmha_v2"
                        r"|fmha_cudnn_gen|fp4_kv_(?:quant|dequant)|cake_dsv4\w*", False),
    ("moe_misc", r"bgmv_moe|hash_topk|moe_utils", False),
    ("xqa", r"xqa_\w+", False),
    ("comm", r"\w*comm|pcie_ipc_\w+|dcp_\w+", False),
)
OTHER = "other"
_RULES = tuple((name, re.compile(pattern), serving) for name, pattern, serving in FAMILIES)
GENCODE = re.compile(r"-gencode=arch=(compute_\w+),code=(\w+)")


def family_of(module: str) -> str:
    for name, rule, _serving in _RULES:
        if rule.fullmatch(module):
            return name
    return OTHER


def serving_families() -> list[str]:
    return [name for name, _p, serving in FAMILIES if serving]


def family_order() -> list[str]:
    return [name for name, _p, _s in FAMILIES] + [OTHER]


# --- the child: one arch list or one chip, in a fresh interpreter ---------------------------------

def _setup(source: Path, workspace: Path) -> None:
    """As flashinfer.aot.compile_and_package_modules points FlashInfer at its source tree and a
    build folder (aot.py), so that spec generation writes only under `workspace`."""
    sys.path.insert(0, str(source))
    import torch.utils.cpp_extension as cpp_extension

    # A CPU build of torch leaves CUDA_HOME unset whatever the environment says, and some module
    # generators read torch's include paths: only where torch has none, take the toolkit's.
    if cpp_extension.CUDA_HOME is None and os.environ.get("CUDA_HOME"):
        cpp_extension.CUDA_HOME = os.environ["CUDA_HOME"]
    from flashinfer.jit import env as jit_env

    jit_env.FLASHINFER_CSRC_DIR = source / "csrc"
    jit_env.FLASHINFER_INCLUDE_DIR = source / "include"
    jit_env.CUTLASS_INCLUDE_DIRS = [source / "3rdparty" / "cutlass" / "include",
                                    source / "3rdparty" / "cutlass" / "tools" / "util" / "include"]
    jit_env.SPDLOG_INCLUDE_DIR = source / "3rdparty" / "spdlog" / "include"
    jit_env.FLASHINFER_WORKSPACE_DIR = workspace
    jit_env.FLASHINFER_JIT_DIR = workspace / "cached_ops"
    jit_env.FLASHINFER_GEN_SRC_DIR = workspace / "generated"
    jit_env.FLASHINFER_JIT_DIR.mkdir(parents=True, exist_ok=True)
    jit_env.FLASHINFER_GEN_SRC_DIR.mkdir(parents=True, exist_ok=True)


def _flags(spec) -> list[str]:
    spec.write_ninja()
    text = spec.ninja_path.read_text()
    return sorted({f"{arch},{code}" for arch, code in GENCODE.findall(text)})


def _module(spec) -> dict:
    sources = [Path(s) for s in spec.sources]
    return {"name": spec.name, "family": family_of(spec.name),
            "cuda_sources": sum(1 for s in sources if s.suffix == ".cu"), "sources": len(sources),
            "gencode": _flags(spec)}


def child_plan(source: Path, workspace: Path) -> dict:
    _setup(source, workspace)
    import flashinfer.aot as aot
    from flashinfer.jit.core import current_compilation_context

    config = aot.get_default_config()
    caps = aot.detect_sm_capabilities()
    specs = aot.gen_all_modules(
        config["f16_dtype"], config["f8_dtype"], config["fa2_head_dim"], config["fa3_head_dim"],
        config["use_sliding_window"], config["use_logits_soft_cap"], caps, config["add_comm"],
        config["add_gemma"], config["add_oai_oss"], config["add_moe"], config["add_act"],
        config["add_misc"], config["add_xqa"])
    return {"arch_list": os.environ["FLASHINFER_CUDA_ARCH_LIST"],
            "target_archs": sorted(f"{M}{m}" for M, m in current_compilation_context.TARGET_CUDA_ARCHS),
            "capabilities": sorted(k for k, v in caps.items() if v),
            "modules": [_module(s) for s in specs]}


# (family, where FlashInfer calls it, module, getter, argument: "cc" = f"{major}{minor}", or none)
PROBES: tuple[tuple[str, str, str, str, str | None], ...] = (
    ("fp4_quantize", "flashinfer/quantization/fp4_quantization.py fp4_quantize",
     "flashinfer.quantization.fp4_quantization", "get_fp4_quantization_module", "cc"),
    ("fused_moe_cutlass", "flashinfer/fused_moe/core.py cutlass_fused_moe",
     "flashinfer.fused_moe.core", "get_cutlass_fused_moe_module", "cc"),
    ("gemm_sm12x", "flashinfer/gemm/gemm_base.py mm_fp4 (cutlass, SM12x)",
     "flashinfer.gemm.gemm_base", "get_gemm_sm120_module_cutlass_fp4", None),
    ("sampling_norm", "flashinfer/sampling.py", "flashinfer.sampling", "get_sampling_module", None),
    ("sampling_norm", "flashinfer/norm/__init__.py", "flashinfer.norm", "get_norm_module", None),
)


def child_runtime(source: Path, workspace: Path, cc: str) -> dict:
    _setup(source, workspace)
    import importlib

    import torch
    from flashinfer.jit.core import MissingJITCacheError, current_compilation_context

    major, minor = cc.split(".")
    out: dict = {"cc": cc, "context": sorted(f"{M}{m}" for M, m in current_compilation_context.TARGET_CUDA_ARCHS),
                 "torch_cuda": torch.version.cuda, "probes": []}
    if torch.version.cuda is None:
        out["not_run"] = "torch is a CPU build: FlashInfer's SM12x getters read torch.version.cuda"
        return out
    for family, where, module, getter, arg in PROBES:
        fn = getattr(importlib.import_module(module), getter)
        args = (f"{major}{minor}",) if arg == "cc" else ()
        row = {"family": family, "where": where, "call": f"{module}.{getter}({', '.join(map(repr, args))})"}
        try:
            fn(*args)
            row["error"] = "loaded: an AOT module or a JIT cache was found (the probe expects none)"
        except MissingJITCacheError as exc:
            spec = exc.spec
            row.update({"module": spec.name, "gencode": _flags(spec)})
        except Exception as exc:  # a getter that refuses this chip is a result, not a crash
            row["error"] = f"{type(exc).__name__}: {exc}"[:300]
        out["probes"].append(row)
    return out


# --- the parent ------------------------------------------------------------------------------------

def _run_child(args: list[str], env: dict[str, str]) -> dict:
    proc = subprocess.run([sys.executable, __file__, *args], env=env, capture_output=True, text=True,
                          timeout=1800)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr[-4000:])
        raise SystemExit(f"flashinfer_aot_plan: {' '.join(args)} failed (exit {proc.returncode})")
    return json.loads(proc.stdout)


def runtime_arch(cc: str, source: Path, env: dict[str, str]) -> str:
    """FLASHINFER_CUDA_ARCH_LIST as FlashInfer derives it from a device of compute capability `cc`
    (compilation_context.py _normalize_cuda_arch, which asks nvcc for the CUDA version)."""
    major, minor = (int(x) for x in cc.split("."))
    code = ("import sys; sys.path.insert(0, sys.argv[1]); "
            "from flashinfer.compilation_context import CompilationContext as C; "
            "M, m = C._normalize_cuda_arch(int(sys.argv[2]), int(sys.argv[3])); print(f'{M}.{m}')")
    proc = subprocess.run([sys.executable, "-c", code, str(source), str(major), str(minor)], env=env,
                          capture_output=True, text=True, timeout=600, check=True)
    return proc.stdout.strip().splitlines()[-1]


def _tool_versions(env: dict[str, str]) -> dict:
    import platform

    import torch
    cuda = env.get("CUDA_HOME") or "/usr/local/cuda"
    nvcc = Path(cuda) / "bin" / "nvcc"
    try:
        text = subprocess.run([str(nvcc), "--version"], capture_output=True, text=True, timeout=60).stdout
        found = re.findall(r"release (\S+), (V\S+)", text)
        nvcc_version = f"{found[0][0].rstrip(',')} {found[0][1]}" if found else "?"
    except OSError:
        nvcc_version = "not found"
    return {"nvcc": nvcc_version, "torch": torch.__version__, "torch_cuda": torch.version.cuda,
            "python": platform.python_version()}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--source", type=Path, required=True, help="FlashInfer's source tree (an unpacked sdist)")
    p.add_argument("--arch-list", action="append", default=[], help="FLASHINFER_CUDA_ARCH_LIST, repeatable")
    p.add_argument("--runtime-cc", action="append", default=[], help="a chip's compute capability, repeatable")
    p.add_argument("--sdist", type=Path, help="the sdist the tree came from (its sha256 goes in the record)")
    p.add_argument("--label", default="", help="where it ran, in words (goes in the record)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--child", choices=["plan", "runtime"], help=argparse.SUPPRESS)
    p.add_argument("--cc", help=argparse.SUPPRESS)
    p.add_argument("--workspace", type=Path, help=argparse.SUPPRESS)
    a = p.parse_args(argv)
    source = a.source.resolve()
    if a.child:
        result = (child_plan(source, a.workspace) if a.child == "plan"
                  else child_runtime(source, a.workspace, a.cc))
        json.dump(result, sys.stdout)
        return 0
    if not (source / "flashinfer" / "aot.py").is_file():
        raise SystemExit(f"flashinfer_aot_plan: {source} is not a FlashInfer source tree (no flashinfer/aot.py)")
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLASHINFER_")}
    meta = (source / "flashinfer" / "_build_meta.py").read_text()
    version = re.search(r'__version__ = "([^"]+)"', meta)
    commit = re.search(r'__git_commit__ = "([^"]+)"', meta)
    record: dict = {"kind": "flashinfer-aot-plan", "flashinfer": version[1] if version else "?",
                    "git_commit": commit[1] if commit else "?", "label": a.label,
                    "sdist": ({"file": a.sdist.name, "sha256": hashlib.sha256(a.sdist.read_bytes()).hexdigest()}
                              if a.sdist else None),
                    "toolchain": _tool_versions(env), "plans": [], "runtime": []}
    with tempfile.TemporaryDirectory(prefix="fi-plan-") as tmp:
        for i, arch in enumerate(a.arch_list):
            record["plans"].append(_run_child(
                ["--source", str(source), "--out", "-", "--child", "plan", "--workspace", f"{tmp}/p{i}"],
                {**env, "FLASHINFER_CUDA_ARCH_LIST": arch, "FLASHINFER_WORKSPACE_BASE": f"{tmp}/h{i}"}))
        for i, cc in enumerate(a.runtime_cc):
            arch = runtime_arch(cc, source, env)
            row = _run_child(
                ["--source", str(source), "--out", "-", "--child", "runtime", "--cc", cc, "--workspace", f"{tmp}/r{i}"],
                {**env, "FLASHINFER_CUDA_ARCH_LIST": arch, "FLASHINFER_DISABLE_JIT": "1",
                 "FLASHINFER_WORKSPACE_BASE": f"{tmp}/rh{i}"})
            row["runtime_arch_list"] = arch
            record["runtime"].append(row)
    for plan in record["plans"]:
        names = {m["name"] for m in plan["modules"]}
        chips = {a.rstrip("abcdefghijklmnopqrstuvwxyz") for a in plan["arch_list"].split()}
        plan["families"] = _families(plan["modules"])
        plan["runtime_not_in_aot"] = sorted({
            f"{r['cc']}: {probe['module']}" for r in record["runtime"] if r["cc"] in chips
            for probe in r["probes"] if probe.get("module") and probe["module"] not in names})
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
    for plan in record["plans"]:
        print(f"{plan['arch_list']}: {len(plan['modules'])} modules, "
              f"{sum(m['cuda_sources'] for m in plan['modules'])} CUDA sources, arch flags "
              f"{sorted({g for m in plan['modules'] for g in m['gencode']})}")
    for r in record["runtime"]:
        for probe in r["probes"]:
            print(f"  run time on {r['cc']} ({r['runtime_arch_list']}): {probe['call']} -> "
                  f"{probe.get('module') or probe.get('error')} {probe.get('gencode', '')}")
    return 0


def _families(modules: list[dict]) -> dict:
    out: dict = {}
    for m in modules:
        f = out.setdefault(m["family"], {"modules": 0, "cuda_sources": 0, "gencode": []})
        f["modules"] += 1
        f["cuda_sources"] += m["cuda_sources"]
        f["gencode"] = sorted(set(f["gencode"]) | set(m["gencode"]))
    return {k: out[k] for k in family_order() if k in out}


if __name__ == "__main__":
    sys.exit(main())
