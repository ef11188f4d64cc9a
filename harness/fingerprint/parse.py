"""`fingerprint(text)`: what vLLM really did, read from its own log.

A pure function of the text: no files, no clock, no environment. Every fact it reports keeps the
log line that proved it (`evidence`), so a verdict or a bug report can quote it.

Message formats, from the PyPI sdists (0.33.0 unless said otherwise):
- MoE: fused_moe/oracle/nvfp4.py `Using '{b}' NvFp4 MoE backend out of potential backends: [...]`;
  oracle/fp8.py the same without quotes (`Using {b} Fp8 MoE backend ...`), also Int8 / WNA16 ...
- NVFP4 linear: kernels/linear/__init__.py `Using %s for NVFP4 GEMM` (class name); 0.16.0
  nvfp4_utils.py printed the Enum (`Using NvFp4LinearBackend.MARLIN for NVFP4 GEMM`).
- Other linear: `Selected %s for %s` (kernel class, layer or scheme).
- Attention: platforms/cuda.py `Using %s attention backend out of potential backends: %s.` (auto)
  and `Using %s backend.` with an AttentionBackendEnum (explicit); 0.11.0 prose, see tables.
- CUDA graphs: engine config dump `'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECEWISE: (2, 1)>`
  (older dumps print `[2, 1]`); compilation.py downgrades `...; setting cudagraph_mode=PIECEWISE`.
- KV cache: kv_cache_utils.py `GPU KV cache size: 872,960 tokens, Maximum concurrency for 2,048
  tokens per request: 426.25x` (0.33.0, one line) or the same as two lines (0.25.1, 0.11.0).
- `Model loading took %s GiB memory and %.6f seconds` (0.11.0: `took %.4f GiB and`);
  `Graph capturing finished in %.0f secs, took %.2f GiB`.
- Requested: entrypoints `non-default args: %s` (a dict repr); engine config `kernel_config=
  KernelConfig(... moe_backend='marlin', linear_backend='auto' ...)`.
- FlashInfer autotuner: `[Autotuner]: Skipped {n} unsupported tactic(s) for {op} (...)`.
- Other linear kernel lines (0.2x): `Using FlashInferCutlassMxfp8LinearKernel for MXFP8 GEMM`,
  `Using MacheteLinearKernel for GPTQMarlinLinearMethod`; older MoE wordings are data
  (kernel_names.toml [moe.legacy_messages]).
- Speculative decoding: gpu_model_runner.py `Loading drafter model...` (0.10-0.33) starts the
  drafter's own kernel lines, up to that process's `Model loading took`; the method and
  `num_spec_tokens` from the engine config dump `speculative_config=SpeculativeConfig(method=
  'eagle3', model=..., num_spec_tokens=3)` or the `speculative_config` of non-default args;
  v1/spec_decode/metrics.py `SpecDecoding metrics: ...`, whose fields changed: 0.8 `Draft
  acceptance rate: 59.4%, Accepted: N tokens, Drafted: N tokens`; 0.9+ adds `Mean acceptance
  length`, `Per-position acceptance rate: 0.800, 0.594`; 0.10+ `Accepted throughput`, `Drafted
  throughput` and `Avg Draft acceptance rate: 59.4%` last. Read field by field.
- Failures: see failure.py (root cause, phase, operation) and harness/data/failures.toml.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from harness.fingerprint.failure import (
    QUIET_LEVELS,
    Indexed,
    RootCause,
    cut_traceback,
    died,
    op_near,
    root_cause,
)
from harness.fingerprint.lines import split_lines
from harness.fingerprint.model import Fingerprint
from harness.fingerprint.tables import KernelNames, Signature, kernel_names, signatures

_MOE = re.compile(
    # 0.25.1 unquantized.py prints a display name: "Using FlashInfer CUTLASS Unquantized MoE ..."
    # 0.3x LoRA: "Using TRITON Unquantized MoE LoRA backend"
    r"Using '?(?P<backend>[A-Z][\w ]*?)'? (?P<quant>[A-Za-z0-9]+) MoE (?:LoRA )?backend"
    # 0.25.1 int_wna16.py: "Using 'MARLIN' WNA16 MoE backend." (no list of candidates)
    r"(?: out of potential backends|(?: \([^)]*\))?\.?\s*$)"
)
# The kernel-class form (0.2x modular kernels: "Using CutlassExpertsMxfp4 for MXFP4 MoE", 0.23),
# the backend-word form ("Using Marlin backend for WNA16 MoE (group_size=32, num_bits=4)",
# "Using Cutlass BlockScaled GroupedGemm backend for FP8 MoE") and a fallback that names what it
# falls back to ("Falling back to MARLIN for NvFp4 MoE", "Falling back to Marlin FP4 MoE kernel").
# Names the legacy table maps win; any other name is reported as printed.
_MOE_USING = re.compile(
    r"^(?:Using|Selected) (?P<backend>[A-Za-z][\w.]*(?: [A-Za-z][\w.]*){0,3}?)(?: backend| kernels?)?"
    # "Using MarlinExperts (weight-only FP4) for AutoRound MXFP4 MoE" (0.27)
    r"(?: \([^)]*\))? for (?P<quant>[\w-]+(?: [\w-]+){0,3}) MoE\b"
    r"|[Ff]alling back to (?P<fallback>[A-Za-z][\w.]*)(?: for (?P<fquant>[\w-]+) MoE\b| (?P<kquant>\w+) MoE kernel)"
    # 0.32 oracle/mxfp4.py "No Mxfp4 MoE backend supports activation=... Falling back to 'MARLIN'
    # with BF16 activations."
    r"|MoE backend supports .*[Ff]alling back to '(?P<quoted>\w+)'"
    # 0.12 "Using Marlin for ModelOptNvFp4FusedMoE."; 0.20 "Using
    # Nvfp4QuantizationEmulationTritonExperts MOE backend."; 0.10-0.17 mxfp4.py (gpt-oss MoE)
    # "Using FlashInfer MXFP4 MXFP8 TRTLLM backend for SM100"
    r"|^Using (?P<method>\w+) for \w*MoE\w*\.?\s*$|^Using (?P<upper>\w+) M[Oo]E backend"
    r"|^Using (?P<moemethod>\w+MoEMethod)\b"
    r"|^Using (?P<mxfp4>FlashInfer MXFP4 [\w ]+?) backend for SM\d+"
)
# `Using X for Y GEMM` (any format), `Using XKernel for Y`, `Using Enum.X for Y`; and `Selected`.
_USING_KERNEL = re.compile(
    r"^Using (?P<kernel>[\w.-]+)(?: backend)? for (?:(?P<gemm>[\w-]+) GEMM|(?P<what>\w+))\.?\s*$"
)
# awq_marlin / gptq_marlin / bitblas (0.8-0.2x): "The model is convertible to awq_marlin during
# runtime. Using awq_marlin kernel."; mxfp4.py "MXFP4 linear layer is not implemented - falling
# back to UnquantizedLinearMethod."
_LINEAR_PROSE = re.compile(
    r"(?:runtime|format)\. Using (?P<kernel>\w+) kernel\.?\s*$"
    r"|linear layer is not implemented - falling back to (?P<fallback>\w+)"
    r"|falling back to (?P<kernel_fb>\w+(?:LinearKernel|LinearMethod))\b"
    # quark 0.2x: "The current platform does not support native MXFP4 computation. Using
    # EmulationMxfp4LinearKernel, with simulated weight dequantization ..."
    r"|\bUsing (?P<using_k>\w+LinearKernel)\b"
)
_KERNEL_NAME = re.compile(r"^(?:\w+Kernel|\w+Backend\.\w+)$")
_SELECTED = re.compile(r"Selected (?P<kernel>\w+Kernel) for (?P<what>\S.*?)\s*$")
_DRAFTER_START = re.compile(r"Loading drafter model")
_SPEC_CONFIG = re.compile(r"speculative_config=SpeculativeConfig\((?P<body>[^)]*)\)")
_SPEC_FIELD = re.compile(
    r"""['"]?(?P<key>method|num_spec_tokens|num_speculative_tokens)['"]?\s*[:=]\s*['"]?(?P<value>[\w.-]+)"""
)
_SPEC_METRICS = re.compile(r"SpecDecoding metrics:\s*(?P<body>.*)$")
# V0 (0.6-0.7) spec_decode/metrics.py: "Speculative metrics: Draft acceptance rate: 0.067, System
# efficiency: 0.167, Number of speculative tokens: 5, Number of accepted tokens: 1, ..." (fractions;
# cumulative since start).
_SPEC_METRICS_V0 = re.compile(
    r"Speculative metrics: Draft acceptance rate: (?P<rate>[\d.]+|nan)"
    r"(?:.*?Number of speculative tokens: (?P<k>\d+))?"
)
_SPEC_RATE = re.compile(r"(?:^|, )(?:Avg )?Draft acceptance rate: (?P<pct>[\d.]+|nan)%")
_SPEC_COUNTS = re.compile(r"Accepted: (?P<acc>\d+) tokens, Drafted: (?P<dr>\d+) tokens")
_SPEC_MEAN_LEN = re.compile(r"Mean acceptance length: (?P<x>[\d.]+)")
_SPEC_PER_POS = re.compile(r"Per-position acceptance rate: (?P<r>[\d.]+(?:, [\d.]+)*)")
_ATTN_AUTO = re.compile(
    # ROCm (0.19+) prints the same without "attention"
    r"Using (?P<name>[A-Z][A-Z0-9_]*) (?:attention )?backend out of potential backends"
)
_ATTN_EXPLICIT = re.compile(
    r"^Using (?:AttentionBackendEnum\.)?(?P<name>[A-Z][A-Z0-9_]*) backend"
    r"(?: \(selected via --attention-backend\))?\.?\s*$"
)
# 0.11.0 "Using Flash Attention backend on V1 engine."; V0 (<=0.10) "Using Flash Attention
# backend." / "Using XFormers backend."; only names in kernel_names.toml count.
_ATTN_LEGACY = re.compile(
    r"^Using (?P<name>[\w ]+?) backend(?: with \w+ KV cache layout)?"
    # 0.9 "Using FlexAttention backend for head_size=72 on V1 engine."; 0.9-0.10 "... on V1
    # engine by default for Blackwell (SM 10.0) GPUs."
    r"(?:(?: for [^.]*?)? on V1 engine)?(?: by default for .*?GPUs)?\.?\s*$"
)
_CG_CONFIG = re.compile(
    r"""['"]cudagraph_mode['"]\s*:\s*(?:<CUDAGraphMode\.(?P<name>\w+)[^>]*>|(?P<num>\[\s*\d\s*,\s*\d\s*\]|\d)|['"](?P<str>\w+)['"]|None)"""
)
_CG_DOWNGRADE = re.compile(
    # 0.32 "Overriding cudagraph_mode FULL_AND_PIECEWISE to NONE"
    r"(?i:setting|overriding|override) (?:cudagraph[_ ]mode\s*(?:(?:from )?[\w.]+ )?(?:=|to)\s*"
    r"|to (?=[A-Z_]+\.?\s*$))(?P<mode>[A-Z][A-Z_]+)\b"
    # 0.10 DeepEP: "using PIECEWISE CUDA graphs and excluding MoE ops from capture"
    r"|using (?P<using>PIECEWISE|FULL) CUDA graphs"
)
# Releases that turn CUDA graphs off in prose: "Enforce eager set, disabling torch.compile and
# CUDAGraphs", "Cudagraph is disabled under eager mode", "CUDA graph is not supported on ...,
# fallback to the eager mode", "disabling cudagraph_mode".
_CG_OFF = re.compile(
    r"(?i)disabling (?:torch\.compile and )?cuda ?graphs|cuda ?graphs? (?:is|are) disabled"
    r"|fall ?back to (?:the )?eager mode|disabling cudagraph(?:_mode)?\b|cudagraph_mode=none\b"
    r"|[Ff]orcing enforce eager|Skipping CUDA graph capture|No cudagraph will be used"
)
_KV_TOKENS = re.compile(r"KV cache size: (?P<tokens>[\d,]+) tokens")
_MAX_CONC = re.compile(
    r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: (?P<x>[\d.]+)x"
)
_MODEL_LOAD = re.compile(
    r"Model loading took (?P<gib>[\d.]+) GiB (?:memory )?and (?P<s>[\d.]+) seconds"
)
_GRAPH_DONE = re.compile(
    r"Graph capturing finished in (?P<s>[\d.]+) secs?, took (?P<gib>-?[\d.]+) GiB"
)
_AUTOTUNER = re.compile(
    r"\[autotuner\]: Skipped (?P<n>\d+) unsupported tactic\(s\) for (?P<op>\S+)", re.IGNORECASE
)
# FlashInfer 0.2-0.5 logged each failed tactic instead of the summary (ERROR "[Autotuner]: Failed
# when profiling {runner} {tactic}, shapes=..."; later WARNING "[Autotuner]: Skipping tactic
# {runner} {tactic}, due to failure while profiling"): counted per runner class, distinct tactics.
_AUTOTUNER_TACTIC = re.compile(
    r"\[Auto[Tt]un+er\]: (?:Skipping tactic|Failed when profiling) "
    r"(?:<\S*?(?P<runner>\w+) object at 0x[0-9a-f]+>|(?P<name>[^\s,]+)) (?P<tactic>[^\s,]+)"
)
_VERSION = (
    # 0.33.0 v1/engine/core.py; V0 (<=0.10) llm_engine.py "Initializing an LLM engine (v0.6.3) ..."
    re.compile(r"Initializing an? (?:V1 )?LLM engine \(v(?P<v>[^)\s]+)\)"),
    # 0.11.0 entrypoints/openai/api_server.py; 0.33.0 entrypoints/common/startup.py (no logo)
    re.compile(r"vLLM (?:API )?server version (?P<v>[^\s,]+)"),
    # the logo form of the same message (0.20+): "... ▀▄▀ █  version 0.20.0"
    re.compile(r"█\s+version\s+(?P<v>\d+\.\d+\S*)"),
)
_NON_DEFAULT = re.compile(r"non-default args: (?P<dict>\{.*\})\s*$")
_KERNEL_CONFIG_FIELD = re.compile(
    r"\b(?P<key>moe_backend|linear_backend)=['\"](?P<value>[\w-]+)['\"]"
)
_ENV = re.compile(
    r"\b(?P<name>VLLM_USE_FLASHINFER_MOE_FP4|VLLM_USE_FLASHINFER_MOE_FP8|VLLM_FLASHINFER_MOE_BACKEND"
    r"|VLLM_NVFP4_GEMM_BACKEND)=['\"]?(?P<value>[\w-]*)"
)
_UNKNOWN_ENV = re.compile(r"Unknown vLLM environment variable detected:?\s*(?P<name>VLLM_\w+)")
# Words that appear in every line the main loop reads; a line with none of them is skipped
# (most of a long log is request and progress lines). Kept in step with the regexes above.
_PROSE_MAX = 1500
_INTERESTING = re.compile(
    r"Using|Selected|cudagraph|KV cache|concurrency|Model loading|Graph captur|Capturing CUDA"
    r"|utotuner|uto[Tt]uner|unsupported tactic|version|non-default|kernel_config|KernelConfig"
    # plain literals only: a branch that starts with a class ([Ee]ager) makes `re` try it at
    # every position and this runs once per line (4x slower on a 1 MB log)
    r"|VLLM_|drafter|speculative|Speculative|SpecDecoding|Initializing|MoE|MOE|alling back"
    r"|eager|Eager|CUDA graph|CUDA Graph|CUDAGraph|Overriding to|convertible"
)

# CUDAGraphMode values (0.33.0 config/compilation.py): NONE=0, PIECEWISE=1, FULL=2,
# FULL_DECODE_ONLY=(FULL, NONE), FULL_AND_PIECEWISE=(FULL, PIECEWISE).
_CG_BY_VALUE = {
    "0": "NONE",
    "1": "PIECEWISE",
    "2": "FULL",
    "[2,0]": "FULL_DECODE_ONLY",
    "[2,1]": "FULL_AND_PIECEWISE",
}
_REQUEST_KEYS = {
    "moe_backend": "moe_backend",
    "linear_backend": "linear_backend",
    "attention_backend": "attention_backend",
}


def _number(text: str) -> int:
    return int(text.replace(",", ""))


def _parse_dict(text: str) -> dict[str, Any] | None:
    """A Python dict repr; values that are not literals (enums, objects) make it fall back."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        value = None
    if isinstance(value, dict):
        return value
    # Fall back to the flat `'key': 'value'` pairs we care about.
    found = dict(re.findall(r"'(\w+)':\s*'([^']*)'", text))
    return found or None


def _requested_from_args(args: dict[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    nested = args.get("kernel_config")
    sources = [args] + ([nested] if isinstance(nested, dict) else [])
    for source in sources:
        for key, name in _REQUEST_KEYS.items():
            value = source.get(key)
            if isinstance(value, str) and value.lower() != "auto":
                out[name] = value
    return out


def _requested_from_env(env: dict[str, str], names: KernelNames) -> dict[str, str]:
    out: dict[str, str] = {}
    # vLLM reads these as bool(int(value)): "0" is an explicit no, not a request.
    flags = (env.get("VLLM_USE_FLASHINFER_MOE_FP4"), env.get("VLLM_USE_FLASHINFER_MOE_FP8"))
    if any(v is not None and v.isdigit() and int(v) != 0 for v in flags):
        backend = env.get("VLLM_FLASHINFER_MOE_BACKEND")
        out["moe_backend"] = names.moe_env_backend.get(backend or "", "flashinfer")
    if gemm := env.get("VLLM_NVFP4_GEMM_BACKEND"):
        out["linear_backend"] = names.linear_env_backend.get(gemm, gemm)
    return out


@dataclass(frozen=True)
class _Hit:
    sig: Signature
    index: int
    asked: str | None
    phase: str | None
    op: str | None


def _signature_hit(
    sig: Signature, ix: Indexed, root: RootCause | None, process_ended: bool
) -> _Hit | None:
    lines = ix.lines
    if sig.on == "root-cause":
        candidates: Iterator[int] = iter(
            [root.index] if root is not None and sig.pattern.search(root.line) else []
        )
    else:
        candidates = ix.find(_multiline(sig.pattern))
    for i in candidates:
        ln = lines[i]
        if sig.raised_only and ln.level in QUIET_LEVELS:
            continue
        phase = ix.phase(i)
        if (sig.phases and phase not in sig.phases) or phase in sig.not_phases:
            continue
        op = op_near(ix, i) if (sig.ops or sig.not_ops) else None
        if (sig.ops and op not in sig.ops) or op in sig.not_ops:
            continue
        m = sig.pattern.search(ln.message)
        asked = m.group("asked") if m and "asked" in sig.pattern.groupindex else None
        hit = _Hit(sig, i, asked, phase, op)
        break
    else:
        return None
    if not all(ix.any(_multiline(r)) for r in sig.requires):
        return None
    if sig.unless_any is not None and ix.any(_multiline(sig.unless_any)):
        return None
    if sig.unless_after is not None:
        if not process_ended:
            return None
        rest = ix.text[ix.starts[hit.index + 1] :] if hit.index + 1 < len(lines) else ""
        if _multiline(sig.unless_after).search(rest):
            return None
    return hit


@cache
def _multiline(rx: re.Pattern[str]) -> re.Pattern[str]:
    """The table regex for a search over the joined text (^ and $ per line)."""
    return re.compile(rx.pattern, rx.flags | re.MULTILINE)


_FALLBACK_ON = ("unclassified-death", "traceback-cut", "engine-died")


def _name_failure(
    ix: Indexed,
    explained: _Hit | None,
    root: RootCause | None,
    death: int | None,
    fallback: dict[str, Signature],
    phase: str | None,
    op: str | None,
) -> tuple[str | None, _Hit | None]:
    """(the failure's name, the fallback signature hit to add when no table signature explains
    it). A traceback the log ends inside wins over an earlier exception: that exception did not
    kill the process whose traceback was being printed."""
    if explained is not None:
        return explained.sig.id, None
    cut = cut_traceback(ix)
    if cut is not None and (root is None or root.index < cut.last) and "traceback-cut" in fallback:
        return "traceback-cut", _Hit(fallback["traceback-cut"], cut.index, None, ix.phase(cut.index),
                                     op_near(ix, len(ix.lines) - 1))
    if root is not None:
        sig = fallback.get("unclassified-death")
        return f"exception:{root.type}", _Hit(sig, root.index, None, phase, op) if sig else None
    if death is not None:
        sig = fallback.get("engine-died")
        return "engine-died", _Hit(sig, death, None, phase, op) if sig else None
    return None, None


def _classify(hits: list[_Hit], root: RootCause | None, ix: Indexed) -> tuple[_Hit | None, str]:
    """The fatal signature that explains the death, and its class.

    First (in table order, specific before generic) a signature whose pattern or required
    pattern matches the root-cause line; then the earliest fatal hit in the log."""
    fatal = [h for h in hits if h.sig.severity == "fatal" and h.sig.failure_class]
    if root is not None:
        for h in fatal:
            if h.index == root.index or any(
                r.search(root.line) for r in (h.sig.pattern, *h.sig.requires)
            ):
                return h, h.sig.failure_class or "unclassified"
    if fatal:
        h = min(fatal, key=lambda h: h.index)
        return h, h.sig.failure_class or "unclassified"
    return None, "unclassified"


def _mismatches(
    requested: dict[str, str],
    moe: str | None,
    quant: str | None,
    linear: list[str],
    attention: str | None,
    names: KernelNames,
) -> list[dict[str, str]]:
    out: list[dict[str, str]] = []
    if (asked := requested.get("moe_backend")) and moe is not None:
        expected = names.moe_expected(asked, quant)
        if expected is None or moe not in expected:
            out.append({"what": "moe_backend", "asked": asked, "got": moe})
    if (asked := requested.get("linear_backend")) and linear:
        expected = names.linear_expected(asked) or frozenset()
        wrong = [k for k in linear if k not in expected]
        if wrong:
            out.append({"what": "linear_backend", "asked": asked, "got": ", ".join(wrong)})
    if (asked := requested.get("attention_backend")) and attention is not None:
        if asked.upper() != attention.upper():
            out.append({"what": "attention_backend", "asked": asked, "got": attention})
    return out


@dataclass
class _Model:
    """Kernel selections of one model (the main model or the drafter)."""

    moe: str | None = None
    quant: str | None = None
    legacy_moe: str | None = None
    attention: str | None = None
    linear: list[str] = field(default_factory=list)
    by_layer: dict[str, list[str]] = field(default_factory=dict)

    def add_linear(self, kernel: str, layer: str) -> bool:
        kernels = self.by_layer.setdefault(layer, [])
        if kernel not in kernels:
            kernels.append(kernel)
        if kernel in self.linear:
            return False
        self.linear.append(kernel)
        return True

    @property
    def moe_backend(self) -> str | None:
        return self.moe or self.legacy_moe


def _spec_metrics(body: str) -> tuple[float | None, list[float], float | None, int, int]:
    """(overall rate as a fraction, per-position rates, mean length, accepted, drafted)."""
    rate = None
    counts = _SPEC_COUNTS.search(body)
    acc, drafted = (int(counts.group("acc")), int(counts.group("dr"))) if counts else (0, 0)
    if (m := _SPEC_RATE.search(body)) and m.group("pct") != "nan":
        rate = float(m.group("pct")) / 100
    elif drafted:
        rate = acc / drafted
    per_pos = (
        [float(x) for x in m.group("r").split(", ")] if (m := _SPEC_PER_POS.search(body)) else []
    )
    mean = float(m.group("x")) if (m := _SPEC_MEAN_LEN.search(body)) else None
    return rate, per_pos, mean, acc, drafted


def _spec_from_args(args: dict[str, Any]) -> dict[str, str]:
    # 0.26 dev builds flattened the CLI: 'spec_method': 'dspark', 'spec_tokens': 7
    flat = {
        "method": args.get("spec_method"),
        "num_speculative_tokens": args.get("spec_tokens", args.get("num_speculative_tokens")),
    }
    spec = args.get("speculative_config") or (
        flat if flat["method"] or flat["num_speculative_tokens"] else None
    )
    if isinstance(spec, str):
        try:
            spec = json.loads(spec)
        except (ValueError, RecursionError):
            spec = None
    out: dict[str, str] = {}
    if isinstance(spec, dict):
        if spec.get("method"):
            out["method"] = str(spec["method"])
        n = spec.get("num_speculative_tokens", spec.get("num_spec_tokens"))
        if isinstance(n, int):
            out["num"] = str(n)
    return out


def fingerprint(text: str, *, process_ended: bool = True) -> Fingerprint:
    """Read a vLLM log. `process_ended=False` when the server may still be running: then an
    unfinished CUDA-graph capture is not yet a hang."""
    names = kernel_names()
    lines = split_lines(text)
    ev: dict[str, str] = {}

    main, drafter = _Model(), _Model()
    in_drafter: set[str | None] = set()  # processes between `Loading drafter model` and load end
    cg_mode = version = None
    kv_tokens: int | None = None
    max_conc: float | None = None
    load_gib = load_s = cap_s = cap_gib = None
    skipped: dict[str, int] = {}
    tactics: dict[str, set[str]] = {}  # runner -> failed tactics (older FlashInfer)
    requested_args: dict[str, str] = {}
    env: dict[str, str] = {}
    unknown_env: dict[str, str] = {}
    capture_started = False
    spec: dict[str, str] = {}
    spec_rate: float | None = None
    spec_pos: list[float] = []
    spec_mean: float | None = None
    spec_acc = spec_drafted = spec_lines = 0

    for ln in lines:
        msg = ln.message
        if not _INTERESTING.search(msg) and not ln.raw.startswith(("VLLM_", "#")):
            continue
        if "drafter" in msg and _DRAFTER_START.search(msg):
            in_drafter.add(ln.process)
            ev["drafter"] = msg
        drafting = ln.process in in_drafter
        model, tag = (drafter, "drafter_") if drafting else (main, "")
        using = msg.startswith("Using")
        # The prose forms (legacy MoE, linear, cudagraph wordings) are short sentences; a config
        # dump of several KB names kernels, eager mode and cudagraph_mode and would run every
        # unanchored prose regex over itself.
        prose = len(msg) < _PROSE_MAX
        if "MoE " in msg and (m := _MOE.search(msg)):
            if model.moe is None:
                model.moe, model.quant = m.group("backend"), m.group("quant").lower()
                ev[f"{tag}moe_backend"] = msg
        elif model.legacy_moe is None and prose and (using or "MoE" in msg or "MOE" in msg):
            for rx, backend in names.moe_legacy:
                if rx.search(msg):
                    model.legacy_moe = backend
                    ev.setdefault(f"{tag}moe_backend_legacy", msg)
                    break
            else:
                if m := _MOE_USING.search(msg):
                    model.legacy_moe = next(g for g in m.groups() if g)
                    ev.setdefault(f"{tag}moe_backend_legacy", msg)
        if (
            using
            and " for " in msg
            and (m := _USING_KERNEL.match(msg))
            and (m.group("gemm") or _KERNEL_NAME.match(m.group("kernel")))
        ):
            kernel = m.group("kernel")
            layer = m.group("gemm") or m.group("what")
            if model.add_linear(kernel, layer):
                ev.setdefault(f"{tag}linear_kernels", msg)
                ev[f"{tag}linear:{kernel}"] = msg
        elif "Selected " in msg and (m := _SELECTED.search(msg)):
            kernel = m.group("kernel")
            if model.add_linear(kernel, m.group("what")):
                ev.setdefault(f"{tag}linear_kernels", msg)
                ev[f"{tag}linear:{kernel}"] = msg
        elif prose and ("ernel" in msg or "linear" in msg) and (m := _LINEAR_PROSE.search(msg)):
            kernel = next(g for g in m.groups() if g)
            if model.add_linear(kernel, "linear"):
                ev.setdefault(f"{tag}linear_kernels", msg)
                ev[f"{tag}linear:{kernel}"] = msg
        if "backend" not in msg:
            pass
        elif m := _ATTN_AUTO.search(msg) or _ATTN_EXPLICIT.search(msg):
            model.attention = m.group("name")
            ev[f"{tag}attention_backend"] = msg
        elif (m := _ATTN_LEGACY.search(msg)) and m.group("name") in names.attention_legacy:
            model.attention = names.attention_legacy[m.group("name")]
            ev[f"{tag}attention_backend"] = msg
        if "cudagraph_mode" in msg and "cudagraph_mode" not in ev and (m := _CG_CONFIG.search(msg)):
            if m.group("name"):
                cg_mode = m.group("name")
            elif m.group("num"):
                cg_mode = _CG_BY_VALUE.get(re.sub(r"\s", "", m.group("num")))
            elif m.group("str"):
                cg_mode = m.group("str").upper()
            else:
                cg_mode = "NONE"
            ev["cudagraph_mode"] = msg[max(0, m.start() - 40) : m.end() + 10]
        # cheap substrings first: a capture logs hundreds of progress lines naming CUDA graphs
        if prose and ("etting" in msg or "verrid" in msg or "using " in msg) and (
            "udagraph" in msg or "CUDA graphs" in msg
        ) and (m := _CG_DOWNGRADE.search(msg)):
            cg_mode = (m.group("mode") or m.group("using")).upper()
            ev["cudagraph_mode"] = msg
        elif prose and ("isabl" in msg or "ager" in msg or "kipping" in msg or "No cudagraph" in msg) and (
            _CG_OFF.search(msg)
        ):
            cg_mode = "NONE"
            ev["cudagraph_mode"] = msg
        if "KV cache size" in msg and (m := _KV_TOKENS.search(msg)):
            kv_tokens = _number(m.group("tokens"))
            ev["kv_cache_tokens"] = msg
        if "Maximum concurrency" in msg and (m := _MAX_CONC.search(msg)):
            max_conc = float(m.group("x"))
            ev["max_concurrency"] = msg
        if "Model loading took" in msg and (m := _MODEL_LOAD.search(msg)):
            load_gib, load_s = float(m.group("gib")), float(m.group("s"))
            ev["model_load"] = msg
            in_drafter.discard(ln.process)
        if "Capturing CUDA graphs" in msg:
            capture_started = True
        if "Graph capturing finished" in msg and (m := _GRAPH_DONE.search(msg)):
            cap_s, cap_gib = float(m.group("s")), float(m.group("gib"))
            ev["graph_capture"] = msg
        if "unsupported tactic" in msg and (m := _AUTOTUNER.search(msg)):
            op, n = m.group("op"), int(m.group("n"))
            if n > skipped.get(op, -1):
                skipped[op] = n
                ev[f"autotuner:{op}"] = msg[m.start() :]
        elif ("tactic" in msg or "profiling" in msg) and (m := _AUTOTUNER_TACTIC.search(msg)):
            runner = m.group("runner") or m.group("name")
            tactics.setdefault(runner, set()).add(m.group("tactic"))
            ev.setdefault(f"autotuner:{runner}", msg[m.start() :])
        if version is None and ("version" in msg or "engine (v" in msg):
            for rx in _VERSION:
                if m := rx.search(msg):
                    version = m.group("v")
                    ev["vllm_version"] = msg[: m.end()]
                    break
        if "non-default args" in msg and (m := _NON_DEFAULT.search(msg)):
            if parsed := _parse_dict(m.group("dict")):
                requested_args.update(_requested_from_args(parsed))
                ev["requested"] = msg
                for key, value in _spec_from_args(parsed).items():
                    spec.setdefault(key, value)
        elif "kernel_config=" in msg or "KernelConfig(" in msg:
            for m in _KERNEL_CONFIG_FIELD.finditer(msg):
                if m.group("value").lower() != "auto":
                    requested_args.setdefault(m.group("key"), m.group("value"))
                    ev.setdefault("requested", msg)
        if "speculative" not in msg:
            pass
        elif m := _SPEC_CONFIG.search(msg):
            for f in _SPEC_FIELD.finditer(m.group("body")):
                key = "method" if f.group("key") == "method" else "num"
                spec.setdefault(key, f.group("value"))
            ev.setdefault("speculative_config", m.group(0))
        elif "SpecDecoding" not in msg:
            # a command line (`--speculative-config '{"method": ...}'`) or an older config repr
            tail = msg[msg.index("speculative") :]
            for f in _SPEC_FIELD.finditer(tail):
                key = "method" if f.group("key") == "method" else "num"
                spec.setdefault(key, f.group("value"))
        if "Speculative metrics" in msg and (m := _SPEC_METRICS_V0.search(msg)):
            spec_lines += 1
            if m.group("rate") != "nan":
                spec_rate, spec_pos, spec_mean = float(m.group("rate")), [], None
                ev["spec_decode_metrics"] = msg
            if m.group("k"):
                spec.setdefault("num", m.group("k"))
        if "SpecDecoding metrics" in msg and (m := _SPEC_METRICS.search(msg)):
            rate, pos, mean, acc, drafted = _spec_metrics(m.group("body"))
            spec_lines += 1
            spec_acc, spec_drafted = spec_acc + acc, spec_drafted + drafted
            if rate is not None:
                spec_rate, spec_pos, spec_mean = rate, pos, mean
                ev["spec_decode_metrics"] = msg
        for m in _ENV.finditer(ln.raw) if "VLLM_" in ln.raw else ():
            env[m.group("name")] = m.group("value")
            ev.setdefault("requested_env", ln.raw.strip())
        if "Unknown vLLM" in msg and (m := _UNKNOWN_ENV.search(msg)):
            unknown_env[m.group("name")] = msg

    for runner, failed in tactics.items():
        skipped.setdefault(runner, len(failed))
    requested: dict[str, str] = dict(requested_args)
    source = "args" if requested_args else None
    env_requested = _requested_from_env(env, names)
    for key, value in env_requested.items():
        if key not in requested:
            requested[key] = value
            source = "env" if source is None else "args+env"

    mismatches = _mismatches(
        requested, main.moe_backend, main.quant, main.linear, main.attention, names
    )
    # An env var the release no longer knows is a request that was dropped on the floor.
    for var, line in unknown_env.items():
        if var in env:
            what = "linear_backend" if var == "VLLM_NVFP4_GEMM_BACKEND" else "moe_backend"
            mismatches.append(
                {"what": what, "asked": f"{var}={env[var]}", "got": f"ignored ({line})"}
            )

    # Failures: signatures with their context, then the death and its root cause.
    ix = Indexed(lines)
    death = died(ix)
    root = root_cause(ix)
    hits: list[_Hit] = []
    fallback: dict[str, Signature] = {}
    for sig in signatures():
        if sig.on in _FALLBACK_ON:
            fallback[sig.on] = sig
        elif hit := _signature_hit(sig, ix, root, process_ended):
            hits.append(hit)
    fatal = death is not None or any(h.sig.severity == "fatal" for h in hits)
    failure_class = cause = phase = op = asked = named = None
    cause_line: int | None = None
    if fatal:
        explained, failure_class = _classify(hits, root, ix)
        if root is not None:
            cause, cause_line = root.line, lines[root.index].number
            ev["root_cause"] = root.line
        elif explained is not None:
            cause, cause_line = lines[explained.index].message, lines[explained.index].number
        elif death is not None:
            cause, cause_line = lines[death].message, lines[death].number
        at = explained.index if explained else root.index if root else death
        if at is not None:
            phase = explained.phase if explained else ix.phase(at)
            op = (explained.op if explained else None) or op_near(ix, at)
        named, extra = _name_failure(ix, explained, root, death, fallback, phase, op)
        if extra is not None:
            hits.append(extra)
        cut = cut_traceback(ix) if named == "traceback-cut" and root is None else None
        if cut is not None and death in (None, cut.index):
            where = cut.frames[-1] if cut.frames else "its first frame"
            cause = f"traceback cut off after {where} ({cut.process or 'unprefixed process'})"
            cause_line = lines[cut.index].number
        if explained is not None and explained.sig.failure_class == "backend-refused":
            asked_from = explained.sig.asked_from
            asked = requested.get(asked_from) if asked_from else None
            if asked is None and explained.asked:
                asked = names.moe_flag(explained.asked) or explained.asked.lower()
            if asked is None and asked_from == "moe_backend":
                line = lines[explained.index].message
                asked = next((flag for shown, flag in names.moe_display if shown in line), None)

    signature_context: dict[str, dict[str, Any]] = {}
    for h in hits:
        ev[f"signature:{h.sig.id}"] = (
            cause if h.sig.on == "unclassified-death" and cause else lines[h.index].message
        )
        ctx: dict[str, Any] = {"line": lines[h.index].number, "phase": h.phase or ix.phase(h.index)}
        if h.sig.on == "traceback-cut" and (cut := cut_traceback(ix)) is not None:
            ctx["process"], ctx["frames"] = cut.process, list(cut.frames)
        if h.sig.severity == "fatal":
            ctx["op"] = h.op or op_near(ix, h.index)
        if h.asked:
            ctx["asked"] = h.asked
        signature_context[h.sig.id] = ctx

    def rounded(x: float | None) -> float | None:
        return None if x is None else round(x, 6)

    return Fingerprint(
        moe_backend=main.moe_backend,
        moe_quant=main.quant,
        linear_kernels=tuple(main.linear),
        attention_backend=main.attention,
        cudagraph_mode=cg_mode,
        kv_cache_tokens=kv_tokens,
        max_concurrency=max_conc,
        autotuner_skipped=tuple(skipped.items()),
        requested={k: requested.get(k) for k in _REQUEST_KEYS.values()},
        requested_source=source,
        mismatches=tuple(mismatches),
        signatures=tuple(h.sig.id for h in hits),
        vllm_version=version,
        model_load_gib=load_gib,
        model_load_s=load_s,
        graph_capture_s=cap_s,
        graph_capture_gib=cap_gib,
        capture_started=capture_started,
        evidence=ev,
        linear_by_layer={k: tuple(v) for k, v in main.by_layer.items()},
        drafter_moe_backend=drafter.moe_backend,
        drafter_moe_quant=drafter.quant,
        drafter_linear_kernels=tuple(drafter.linear),
        drafter_attention_backend=drafter.attention,
        spec_method=spec.get("method"),
        num_speculative_tokens=int(spec["num"]) if spec.get("num", "").isdigit() else None,
        spec_acceptance_rate=rounded(spec_rate),
        spec_acceptance_per_position=tuple(spec_pos),
        spec_mean_acceptance_length=spec_mean,
        spec_acceptance_rate_all=rounded(spec_acc / spec_drafted) if spec_drafted else None,
        spec_metrics_lines=spec_lines,
        fatal=fatal,
        failure_class=failure_class,
        root_cause=cause,
        root_cause_line=cause_line,
        failure_phase=phase,
        failure_op=op,
        asked=asked,
        signature_context=signature_context,
        failure_signature=named,
    )
