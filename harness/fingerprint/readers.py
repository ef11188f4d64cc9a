"""The line readers of `fingerprint()`: one per fact family, each with its own sub-model.

`fingerprint()` (parse.py) walks the log once; every line that passes the shared word filter is
handed to each reader in turn (`Reader.read`), and each reader's `facts()` gives its sub-model,
whose fields are the `Fingerprint` fields of its family. Adding a fact means adding it to one
reader: its regex, its field, its `facts()`; the word filter is built from the readers' own
`words`. Readers write the lines that prove their facts into the one shared `evidence` dict, in
line order (the stored JSON keeps that order).

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
- Failures: failure.py `read_failure` and harness/data/failures.toml.
"""

from __future__ import annotations

import ast
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Annotated, ClassVar

from pydantic import AliasChoices, BaseModel, BeforeValidator, ConfigDict, Field

from harness.fingerprint.lines import LogLine
from harness.fingerprint.tables import KernelNames
from harness.record import Scalar, kept

# --- kernels (MoE, linear, attention), shared by the main model and the drafter ---------------
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


# The quantization an older MoE selection line names in prose (the oracle line of 0.14+ prints it
# as a word of its own: `Using 'X' NvFp4 MoE backend`), first match wins. From every release's
# MoE lines (tests/fixtures/upstream/): 0.10-0.17 mxfp4.py "Using FlashInfer MXFP4 MXFP8 TRTLLM
# backend for SM100" (MXFP4 weights, MXFP8 activations), 0.11-0.13 fp8.py "Using FlashInfer FP8
# MoE TRTLLM backend for SM100", nvfp4_moe_support.py "Falling back to Marlin FP4 MoE kernel",
# 0.12 "Using Marlin for ModelOptNvFp4FusedMoE.", "... CompressedTensorsW4A4Nvfp4MoEMethod",
# 0.16 "Using Marlin backend for WNA16 MoE (group_size=..)", 0.20 "Using CutlassExpertsMxfp4 for
# MXFP4 MoE", 0.24 "Using Mxfp8EmulationTritonExperts MoE backend", 0.26 "Int4EmulationTriton
# Experts", 0.11 "Enabling FlashInfer CUTLASS MoE for UnquantizedFusedMoEMethod".
_QUANT_WORDS = tuple((q, re.compile(rx)) for q, rx in (
    ("mxfp4", r"(?i)mxfp4"),
    ("nvfp4", r"(?i)nvfp4|\bfp4\b|w4a4"),
    ("mxfp8", r"(?i)mxfp8"),
    ("fp8", r"(?i)fp8"),
    ("wna16", r"(?i)wna16|w4a16|w8a16"),
    ("int8", r"(?i)\bint8|w8a8"),
    ("int4", r"(?i)\bint4"),
    ("unquantized", r"(?i)unquantized"),
))


def _quant_word(msg: str) -> str | None:
    return next((q for q, rx in _QUANT_WORDS if rx.search(msg)), None)


class KernelFacts(BaseModel):
    """The main model's kernel selections."""

    model_config = ConfigDict(frozen=True)
    moe_backend: str | None = None
    moe_quant: str | None = None
    linear_kernels: tuple[str, ...] = ()
    attention_backend: str | None = None
    linear_by_layer: dict[str, tuple[str, ...]] = {}


class DrafterFacts(BaseModel):
    """A speculative-decoding drafter's own kernel selections."""

    model_config = ConfigDict(frozen=True)
    drafter_moe_backend: str | None = None
    drafter_moe_quant: str | None = None
    drafter_linear_kernels: tuple[str, ...] = ()
    drafter_attention_backend: str | None = None

@dataclass
class _Model:
    """Kernel selections of one model (the main model or the drafter)."""

    moe: str | None = None
    quant: str | None = None
    legacy_moe: str | None = None
    legacy_quant: str | None = None
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

    @property
    def moe_quant(self) -> str | None:
        return self.quant if self.moe else self.legacy_quant



@dataclass
class Context:
    """What the readers share: the evidence (in line order), the kernel tables, and per line
    whether a drafter is loading in the line's process (set by DrafterReader, read first)."""

    names: KernelNames
    evidence: dict[str, str] = field(default_factory=dict)
    drafting: bool = False


class Reader:
    """One fact family. `words`: plain literals (regex alternation) one of which is in every
    line `read` cares about; `raw_starts`: raw-line starts read as well (env dumps)."""

    words: ClassVar[str] = ""
    raw_starts: ClassVar[tuple[str, ...]] = ()

    def read(self, ln: LogLine, msg: str, cx: Context) -> None:
        raise NotImplementedError

    def facts(self) -> BaseModel:
        raise NotImplementedError


# The prose forms (legacy MoE, linear, cudagraph wordings) are short sentences; a config dump of
# several KB names kernels, eager mode and cudagraph_mode and would run every unanchored prose
# regex over itself.
_PROSE_MAX = 1500


def _read_kernel_line(model: _Model, tag: str, msg: str, cx: Context) -> None:
    """MoE, linear and attention selections of one line, for the main model or the drafter."""
    ev, names = cx.evidence, cx.names
    using = msg.startswith("Using")
    prose = len(msg) < _PROSE_MAX

    if "MoE " in msg and (m := _MOE.search(msg)):
        if model.moe is None:
            model.moe, model.quant = m.group("backend"), m.group("quant").lower()
            ev[f"{tag}moe_backend"] = msg
    elif model.legacy_moe is None and prose and (using or "MoE" in msg or "MOE" in msg):
        for rx, backend in names.moe_legacy:
            if rx.search(msg):
                model.legacy_moe, model.legacy_quant = backend, _quant_word(msg)
                ev.setdefault(f"{tag}moe_backend_legacy", msg)
                break
        else:
            if m := _MOE_USING.search(msg):
                model.legacy_moe = next(g for g in m.groups() if g)
                model.legacy_quant = _quant_word(msg)
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


class KernelReader(Reader):
    """The main model's MoE backend and quant, linear kernels and attention backend."""

    words = "Using|Selected|MoE|MOE|alling back|convertible"

    def __init__(self) -> None:
        self.model = _Model()

    def read(self, ln: LogLine, msg: str, cx: Context) -> None:
        if not cx.drafting:
            _read_kernel_line(self.model, "", msg, cx)

    def facts(self) -> KernelFacts:
        m = self.model
        return KernelFacts(moe_backend=m.moe_backend, moe_quant=m.moe_quant, linear_kernels=tuple(m.linear),
                           attention_backend=m.attention,
                           linear_by_layer={k: tuple(v) for k, v in m.by_layer.items()})


# --- drafter ----------------------------------------------------------------------------------

_DRAFTER_START = re.compile(r"Loading drafter model")


class DrafterReader(Reader):
    """`Loading drafter model...` starts the drafter's own kernel lines in that process, up to
    the process's `Model loading took`. Runs first on every line: it sets `cx.drafting`."""

    words = "drafter|Model loading"

    def __init__(self) -> None:
        self.model = _Model()
        self.loading: set[str | None] = set()  # processes between the two lines

    def read(self, ln: LogLine, msg: str, cx: Context) -> None:
        if "drafter" in msg and _DRAFTER_START.search(msg):
            self.loading.add(ln.process)
            cx.evidence["drafter"] = msg
        cx.drafting = ln.process in self.loading
        if cx.drafting:
            _read_kernel_line(self.model, "drafter_", msg, cx)
        if "Model loading took" in msg and _MODEL_LOAD.search(msg):
            self.loading.discard(ln.process)

    def facts(self) -> DrafterFacts:
        m = self.model
        return DrafterFacts(drafter_moe_backend=m.moe_backend, drafter_moe_quant=m.moe_quant,
                            drafter_linear_kernels=tuple(m.linear), drafter_attention_backend=m.attention)


# --- CUDA graphs ------------------------------------------------------------------------------

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
# A config dump hard-wrapped inside the enum name ("... 'cudagraph_mode': <CUDAGraphMode.FULL_AND_PIECE"
# then "WISE: (2, 1)>, ..." on the next line, a paste seen in a vLLM pull request)
_CG_CUT = re.compile(r"""['"]cudagraph_mode['"]\s*:\s*<CUDAGraphMode\.(?P<head>[A-Z_]*)$""")
_CG_TAIL = re.compile(r"(?P<tail>[A-Z_]*)[:>]")
_CG_NAMES = frozenset({"NONE", "PIECEWISE", "FULL", "FULL_DECODE_ONLY", "FULL_AND_PIECEWISE"})
# gpu_model_runner.py _capture_cudagraphs (0.10-0.33): the tqdm bar of each capture pass,
# "Capturing CUDA graphs ({'decode' | 'mixed prefill-decode'}, {CUDAGraphMode name})"
_CG_BAR = re.compile(r"Capturing CUDA graphs \((?P<kind>decode|mixed prefill-decode), (?P<mode>[A-Z_]+)\)")
# The runtime modes the capture passes show -> the cudagraph_mode that captures exactly those
# (config/compilation.py CUDAGraphMode: FULL_AND_PIECEWISE = FULL for uniform decode batches,
# PIECEWISE for mixed ones; FULL_DECODE_ONLY captures decode only).
_CG_FROM_BARS = {
    (("mixed prefill-decode", "PIECEWISE"),): "PIECEWISE",
    (("decode", "FULL"), ("mixed prefill-decode", "PIECEWISE")): "FULL_AND_PIECEWISE",
    (("decode", "FULL"),): "FULL_DECODE_ONLY",
    (("mixed prefill-decode", "FULL"),): "FULL",
    (("decode", "FULL"), ("mixed prefill-decode", "FULL")): "FULL",
}
# entrypoints' `non-default args: {...}` with `'enforce_eager': True`: no CUDA graphs, even in a
# release (or an excerpt) that prints no eager line of its own
_EAGER_ARG = re.compile(r"non-default args: \{.*['\"]enforce_eager['\"]: True\b")
_GRAPH_DONE = re.compile(
    r"Graph capturing finished in (?P<s>[\d.]+) secs?, took (?P<gib>-?[\d.]+) GiB"
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


class GraphFacts(BaseModel):
    model_config = ConfigDict(frozen=True)
    cudagraph_mode: str | None = None
    graph_capture_s: float | None = None
    graph_capture_gib: float | None = None
    capture_started: bool = False


class GraphReader(Reader):
    """The cudagraph mode (config dump, downgrades, prose that turns graphs off) and capture."""

    words = ("cudagraph|Graph captur|Capturing CUDA|eager|Eager|CUDA graph|CUDA Graph|CUDAGraph"
             "|Overriding to")

    def __init__(self) -> None:
        self.mode: str | None = None
        self.seen_config = False
        self.started = False
        self.cap_s: float | None = None
        self.cap_gib: float | None = None
        self.bars: dict[str, tuple[str, str]] = {}  # capture pass kind -> (mode, its first line)
        self.eager_arg: str | None = None  # the non-default args line asking enforce_eager
        self.cut: str | None = None  # the head of an enum name a hard wrap cut (_CG_CUT)
        self.cx: Context | None = None

    def read(self, ln: LogLine, msg: str, cx: Context) -> None:
        ev = cx.evidence
        self.cx = cx
        prose = len(msg) < _PROSE_MAX
        if "enforce_eager" in msg and self.eager_arg is None and _EAGER_ARG.search(msg):
            self.eager_arg = msg

        if self.cut is not None:
            head, self.cut = self.cut, None
            if (m := _CG_TAIL.match(msg)) and (name := head + m.group("tail")) in _CG_NAMES:
                self.mode = name
                ev["cudagraph_mode"] = f"{head}{msg[: m.end() + 8]}"
        if "cudagraph_mode" in msg and "cudagraph_mode" not in ev and (m := _CG_CUT.search(msg)):
            self.cut = m.group("head")
        elif "cudagraph_mode" in msg and "cudagraph_mode" not in ev and (m := _CG_CONFIG.search(msg)):
            if m.group("name"):
                self.mode = m.group("name")
            elif m.group("num"):
                self.mode = _CG_BY_VALUE.get(re.sub(r"\s", "", m.group("num")))
            elif m.group("str"):
                self.mode = m.group("str").upper()
            else:
                self.mode = "NONE"
            ev["cudagraph_mode"] = msg[max(0, m.start() - 40) : m.end() + 10]
        # cheap substrings first: a capture logs hundreds of progress lines naming CUDA graphs
        if prose and ("etting" in msg or "verrid" in msg or "using " in msg) and (
            "udagraph" in msg or "CUDA graphs" in msg
        ) and (m := _CG_DOWNGRADE.search(msg)):
            self.mode = (m.group("mode") or m.group("using")).upper()
            ev["cudagraph_mode"] = msg
        elif prose and ("isabl" in msg or "ager" in msg or "kipping" in msg or "No cudagraph" in msg) and (
            _CG_OFF.search(msg)
        ):
            self.mode = "NONE"
            ev["cudagraph_mode"] = msg
        if "Capturing CUDA graphs" in msg:
            self.started = True
            if (m := _CG_BAR.search(msg)) and m.group("kind") not in self.bars:
                self.bars[m.group("kind")] = (m.group("mode"), msg[m.start() : m.end()])
        if "Graph capturing finished" in msg and (m := _GRAPH_DONE.search(msg)):
            self.cap_s, self.cap_gib = float(m.group("s")), float(m.group("gib"))
            ev["graph_capture"] = msg

    def facts(self) -> GraphFacts:
        mode = self.mode
        # no config dump, downgrade or eager line said it: the capture passes the log shows, else
        # an enforce_eager request in the non-default args
        if mode is None and self.bars:
            shown = tuple(sorted((kind, m) for kind, (m, _) in self.bars.items()))
            mode = _CG_FROM_BARS.get(shown)
            if mode is not None and self.cx is not None:
                self.cx.evidence["cudagraph_mode"] = "; ".join(line for _, line in sorted(self.bars.values()))
        if mode is None and self.eager_arg is not None and not self.started:
            mode = "NONE"
            if self.cx is not None:
                self.cx.evidence["cudagraph_mode"] = self.eager_arg
        return GraphFacts(cudagraph_mode=mode, graph_capture_s=self.cap_s,
                          graph_capture_gib=self.cap_gib, capture_started=self.started)


# --- KV cache ---------------------------------------------------------------------------------

_KV_TOKENS = re.compile(r"KV cache size: (?P<tokens>[\d,]+) tokens")
_MAX_CONC = re.compile(
    r"Maximum concurrency for (?P<len>[\d,]+) tokens per request: (?P<x>[\d.]+)x"
)


class KVCacheFacts(BaseModel):
    model_config = ConfigDict(frozen=True)
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None


class KVCacheReader(Reader):
    """`GPU KV cache size: N tokens` and `Maximum concurrency for N tokens per request: Xx`
    (one line or two, by release)."""

    words = "KV cache|concurrency"

    def __init__(self) -> None:
        self.tokens: int | None = None
        self.conc: float | None = None

    def read(self, ln: LogLine, msg: str, cx: Context) -> None:
        if "KV cache size" in msg and (m := _KV_TOKENS.search(msg)):
            self.tokens = _number(m.group("tokens"))
            cx.evidence["kv_cache_tokens"] = msg
        if "Maximum concurrency" in msg and (m := _MAX_CONC.search(msg)):
            self.conc = float(m.group("x"))
            cx.evidence["max_concurrency"] = msg

    def facts(self) -> KVCacheFacts:
        return KVCacheFacts(kv_cache_tokens=self.tokens, max_concurrency=self.conc)


# --- model load and release -------------------------------------------------------------------

_MODEL_LOAD = re.compile(
    # 0.7-0.8 printed "Model loading took 0.2389 GB and 0.977005 seconds" (the same GiB figure)
    r"Model loading took (?P<gib>[\d.]+) Gi?B (?:memory )?and (?P<s>[\d.]+) seconds"
)
_VERSION = (
    # 0.33.0 v1/engine/core.py; V0 (<=0.10) llm_engine.py "Initializing an LLM engine (v0.6.3) ..."
    # 0.7 "Initializing a V0 LLM engine (v0.6.4.post2...) with config"
    re.compile(r"Initializing an? (?:V[01] )?LLM engine \(v(?P<v>[^)\s]+)\)"),
    # 0.11.0 entrypoints/openai/api_server.py; 0.33.0 entrypoints/common/startup.py (no logo)
    re.compile(r"vLLM (?:API )?server version (?P<v>[^\s,]+)"),
    # the logo form of the same message (0.20+): "... ▀▄▀ █  version 0.20.0"
    re.compile(r"█\s+version\s+(?P<v>\d+\.\d+\S*)"),
)


class LoadFacts(BaseModel):
    model_config = ConfigDict(frozen=True)
    model_load_gib: float | None = None
    model_load_s: float | None = None
    vllm_version: str | None = None


class LoadReader(Reader):
    """`Model loading took X GiB memory and Y seconds` and the release the log names."""

    words = "Model loading|version|Initializing"

    def __init__(self) -> None:
        self.gib: float | None = None
        self.secs: float | None = None
        self.version: str | None = None

    def read(self, ln: LogLine, msg: str, cx: Context) -> None:
        if "Model loading took" in msg and (m := _MODEL_LOAD.search(msg)):
            self.gib, self.secs = float(m.group("gib")), float(m.group("s"))
            cx.evidence["model_load"] = msg
        if self.version is None and ("version" in msg or "engine (v" in msg):
            for rx in _VERSION:
                if m := rx.search(msg):
                    self.version = m.group("v")
                    cx.evidence["vllm_version"] = msg[: m.end()]
                    break

    def facts(self) -> LoadFacts:
        return LoadFacts(model_load_gib=self.gib, model_load_s=self.secs, vllm_version=self.version)


# --- FlashInfer autotuner ---------------------------------------------------------------------

_AUTOTUNER = re.compile(
    r"\[autotuner\]: Skipped (?P<n>\d+) unsupported tactic\(s\) for (?P<op>\S+)", re.IGNORECASE
)
# FlashInfer 0.2-0.5 logged each failed tactic instead of the summary (ERROR "[Autotuner]: Failed
# when profiling {runner} {tactic}, shapes=..."; 0.5 WARNING "[Autotuner]: Skipping tactic
# {runner} {tactic}, due to failure while profiling: {e}"; 0.6-0.7 the same at DEBUG, and "Skipping
# tactic {runner} {tac} while ranking {custom_op}: {e}"): distinct tactics, counted under the op
# being tuned (AutotunerReader).
_AUTOTUNER_TACTIC = re.compile(
    r"\[Auto[Tt]un+er\]: (?:Skipping tactic|Failed when profiling) "
    r"(?P<runner><[^<>]*?(?:<locals>[^<>]*?)?\w+ object at 0x[0-9a-f]+>|[^\s,]+) (?P<tactic>[^\s,]+)"
    r"(?: while ranking (?P<op>[^\s:]+(?:::[^\s:]+)*))?"
)
# 0.6-0.7 the tqdm bar of each tuned op: "[AutoTuner]: Tuning trtllm::fused_moe::gemm1:  50%|..."
_AUTOTUNER_TUNING = re.compile(r"\[Auto[Tt]uner\]: Tuning (?P<op>[^\s:]+(?:::[^\s:]+)*)")
_RUNNER_CLASS = re.compile(r"(?P<cls>\w+) object at 0x")


class AutotunerFacts(BaseModel):
    model_config = ConfigDict(frozen=True)
    autotuner_skipped: tuple[tuple[str, int], ...] = ()


class AutotunerReader(Reader):
    """Skipped tactics per op: the summary line's count, or the distinct tactics of the older
    per-tactic lines, each attributed to the op being tuned (the line's own `while ranking {op}`,
    the process's last `Tuning {op}` line, the process's next summary line, or the runner's op
    from kernel_names.toml [autotuner.runner_ops]; the runner's class name only when none says).

    A runner whose op no line names counts only from two failed tactics up: one such line is an
    excerpt's example ("I see a lot of prints like: ..."), not a count, and the op is a guess."""

    words = "utotuner|uto[Tt]uner|unsupported tactic"

    def __init__(self) -> None:
        self.skipped: defaultdict[str, int] = defaultdict(lambda: -1)  # op -> count (-1: none yet)
        self.tactics: dict[str, set[str]] = {}  # op -> failed tactics (older FlashInfer)
        # process -> op its last `Tuning` line names ("": none yet)
        self.tuning: defaultdict[str | None, str] = defaultdict(str)
        # process -> runner -> (failed tactics, first line) not yet tied to an op
        self.pending: dict[str | None, dict[str, tuple[set[str], str]]] = {}
        self.cx: Context | None = None

    def _add(self, op: str, tactics: set[str], line: str, cx: Context) -> None:
        self.tactics.setdefault(op, set()).update(tactics)
        cx.evidence.setdefault(f"autotuner:{op}", line)

    def read(self, ln: LogLine, msg: str, cx: Context) -> None:
        self.cx = cx
        if "unsupported tactic" in msg and (m := _AUTOTUNER.search(msg)):
            op, n = m.group("op"), int(m.group("n"))
            if n > self.skipped[op]:
                self.skipped[op] = n
                cx.evidence[f"autotuner:{op}"] = msg[m.start() :]
            for tactics, line in self.pending.pop(ln.process, {}).values():
                self._add(op, tactics, line, cx)
        elif ("tactic" in msg or "profiling" in msg) and (m := _AUTOTUNER_TACTIC.search(msg)):
            op = m.group("op") or self.tuning[ln.process] or self.tuning[None]
            if op:
                self._add(op, {m.group("tactic")}, msg[m.start() :], cx)
            else:
                runners = self.pending.setdefault(ln.process, {})
                tactics, _ = runners.setdefault(m.group("runner"), (set(), msg[m.start() :]))
                tactics.add(m.group("tactic"))
        elif "Tuning" in msg and (m := _AUTOTUNER_TUNING.search(msg)):
            self.tuning[ln.process] = m.group("op")

    def facts(self) -> AutotunerFacts:
        skipped = dict(self.skipped)
        tactics = {op: set(t) for op, t in self.tactics.items()}
        for runners in self.pending.values():
            for runner, (failed, line) in runners.items():
                if len(failed) < 2:
                    continue
                op = self.cx.names.runner_op(runner) if self.cx else None
                if op is None:
                    op = m.group("cls") if (m := _RUNNER_CLASS.search(runner)) else runner
                tactics.setdefault(op, set()).update(failed)
                if self.cx:
                    self.cx.evidence.setdefault(f"autotuner:{op}", line)
        for op, failed in tactics.items():
            skipped.setdefault(op, len(failed))
        return AutotunerFacts(autotuner_skipped=tuple(skipped.items()))


# --- what was asked for -----------------------------------------------------------------------

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
_REQUEST_KEYS = ("moe_backend", "linear_backend", "attention_backend")


def _number(text: str) -> int:
    return int(text.replace(",", ""))


class _Backends(BaseModel):
    """The backend requests of a `non-default args` dict or of its nested `kernel_config`, as
    printed (only a string counts as a request); other keys ignored."""

    moe_backend: Annotated[str | None, kept(str)] = None
    linear_backend: Annotated[str | None, kept(str)] = None
    attention_backend: Annotated[str | None, kept(str)] = None

    def asked(self) -> dict[str, str | None]:
        """Request key -> the value printed, in `_REQUEST_KEYS` order."""
        return {"moe_backend": self.moe_backend, "linear_backend": self.linear_backend,
                "attention_backend": self.attention_backend}


class SpeculativeArgs(BaseModel):
    """A `speculative_config` (a dict, or its JSON): the method and the draft length, under
    either name (the first present wins); other keys ignored."""

    method: Annotated[Scalar | None, kept(str, int, float, bool)] = None
    num: Annotated[int | None, kept(int)] = Field(
        None, validation_alias=AliasChoices("num_speculative_tokens", "num_spec_tokens"))


def _given(value: object) -> object:
    # a dict or its JSON text, and an empty one is none (the flattened keys are read then)
    return value if isinstance(value, dict | str) and value else None


class NonDefaultArgs(_Backends):
    """entrypoints' `non-default args: {...}`: the keys the readers use, each read as absent when
    printed with another type."""

    kernel_config: Annotated[_Backends | None, kept(dict)] = None
    speculative_config: Annotated[SpeculativeArgs | str | None, BeforeValidator(_given)] = None
    # 0.26 dev builds flattened the CLI: 'spec_method': 'dspark', 'spec_tokens': 7
    spec_method: Annotated[Scalar | None, kept(str, int, float, bool)] = None
    spec_tokens: Annotated[int | None, kept(int)] = Field(
        None, validation_alias=AliasChoices("spec_tokens", "num_speculative_tokens"))


class _EnvRequest(BaseModel):
    """The backend env vars a log records (`VAR=value`, see `_ENV`), as printed."""

    moe_fp4: str | None = Field(None, alias="VLLM_USE_FLASHINFER_MOE_FP4")
    moe_fp8: str | None = Field(None, alias="VLLM_USE_FLASHINFER_MOE_FP8")
    moe_backend: str | None = Field(None, alias="VLLM_FLASHINFER_MOE_BACKEND")
    nvfp4_gemm: str | None = Field(None, alias="VLLM_NVFP4_GEMM_BACKEND")


def _parse_args(text: str) -> NonDefaultArgs | None:
    """A Python dict repr; values that are not literals (enums, objects) make it fall back."""
    try:
        value = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        value = None
    if isinstance(value, dict):
        return NonDefaultArgs.model_validate(value) if value else None
    # Fall back to the flat `'key': 'value'` pairs we care about.
    found = dict(re.findall(r"'(\w+)':\s*'([^']*)'", text))
    return NonDefaultArgs.model_validate(found) if found else None


def _requested_from_args(args: NonDefaultArgs) -> dict[str, str]:
    out: dict[str, str] = {}
    sources = [args] + ([args.kernel_config] if args.kernel_config is not None else [])
    for source in sources:
        for key, value in source.asked().items():
            if isinstance(value, str) and value.lower() != "auto":
                out[key] = value
    return out


def _requested_from_env(env: dict[str, str], names: KernelNames) -> dict[str, str]:
    out: dict[str, str] = {}
    asked = _EnvRequest.model_validate(env)
    # vLLM reads these as bool(int(value)): "0" is an explicit no, not a request.
    flags = (asked.moe_fp4, asked.moe_fp8)
    if any(v is not None and v.isdigit() and int(v) != 0 for v in flags):
        # an unknown or missing VLLM_FLASHINFER_MOE_BACKEND: any FlashInfer backend
        out["moe_backend"] = names.moe_env_backend.get(asked.moe_backend or "", "flashinfer")
    if gemm := asked.nvfp4_gemm:
        # a value the table does not know is reported as printed
        out["linear_backend"] = names.linear_env_backend.get(gemm, gemm)
    return out

class Mismatch(BaseModel):
    """A request the log itself records (non-default args, kernel config, env) that the
    selection did not follow: `Fingerprint.mismatches`. Unknown keys are kept."""

    model_config = ConfigDict(frozen=True, extra="allow")

    # Field order is the key order of the stored JSON.
    what: str = Field(description="moe_backend | linear_backend | attention_backend")
    asked: str = Field(description="what the log says was asked (an env request as VAR=value)")
    got: str = Field(description="what was selected instead, or `ignored (<line>)`")


def _mismatches(
    requested: dict[str, str | None],
    moe: str | None,
    quant: str | None,
    linear: list[str],
    attention: str | None,
    names: KernelNames,
) -> list[Mismatch]:
    out: list[Mismatch] = []
    if (asked := requested["moe_backend"]) and moe is not None:
        expected = names.moe_expected(asked, quant)
        if expected is None or moe not in expected:
            out.append(Mismatch(what="moe_backend", asked=asked, got=moe))
    if (asked := requested["linear_backend"]) and linear:
        expected = names.linear_expected(asked) or frozenset()
        wrong = [k for k in linear if k not in expected]
        if wrong:
            out.append(Mismatch(what="linear_backend", asked=asked, got=", ".join(wrong)))
    if (asked := requested["attention_backend"]) and attention is not None:
        if asked.upper() != attention.upper():
            out.append(Mismatch(what="attention_backend", asked=asked, got=attention))
    return out


class RequestFacts(BaseModel):
    model_config = ConfigDict(frozen=True)
    requested: dict[str, str | None] = {}
    requested_source: str | None = None
    mismatches: tuple[Mismatch, ...] = ()


class RequestReader(Reader):
    """What the log says was asked for (non-default args, kernel config, env), and where the
    selection differs from it (`mismatches`, against the main model's kernels)."""

    words = "non-default|kernel_config|KernelConfig|VLLM_|Unknown vLLM"
    raw_starts = ("VLLM_", "#")

    def __init__(self) -> None:
        self.args: dict[str, str] = {}  # request key -> value, from the args or kernel config
        self.env: dict[str, str] = {}
        self.unknown_env: dict[str, str] = {}

    def read(self, ln: LogLine, msg: str, cx: Context) -> None:
        ev = cx.evidence
        if "non-default args" in msg and (m := _NON_DEFAULT.search(msg)):
            if parsed := _parse_args(m.group("dict")):
                self.args.update(_requested_from_args(parsed))
                ev["requested"] = msg
        elif "kernel_config=" in msg or "KernelConfig(" in msg:
            for m in _KERNEL_CONFIG_FIELD.finditer(msg):
                if m.group("value").lower() != "auto":
                    self.args.setdefault(m.group("key"), m.group("value"))
                    ev.setdefault("requested", msg)
        for m in _ENV.finditer(ln.raw) if "VLLM_" in ln.raw else ():
            self.env[m.group("name")] = m.group("value")
            ev.setdefault("requested_env", ln.raw.strip())
        if "Unknown vLLM" in msg and (m := _UNKNOWN_ENV.search(msg)):
            self.unknown_env[m.group("name")] = msg

    def facts_for(self, kernels: KernelFacts, names: KernelNames) -> RequestFacts:
        # every request key, None where nothing asked for it
        requested: dict[str, str | None] = dict.fromkeys(_REQUEST_KEYS) | self.args
        source = "args" if self.args else None
        for key, value in _requested_from_env(self.env, names).items():
            if requested[key] is None:
                requested[key] = value
                source = "env" if source is None else "args+env"
        mismatches = _mismatches(requested, kernels.moe_backend, kernels.moe_quant,
                                 list(kernels.linear_kernels), kernels.attention_backend, names)
        # An env var the release no longer knows is a request that was dropped on the floor.
        for var, line in self.unknown_env.items():
            if var in self.env:
                what = "linear_backend" if var == "VLLM_NVFP4_GEMM_BACKEND" else "moe_backend"
                mismatches.append(Mismatch(what=what, asked=f"{var}={self.env[var]}", got=f"ignored ({line})"))
        return RequestFacts(requested=requested,
                            requested_source=source, mismatches=tuple(mismatches))


# --- speculative decoding ---------------------------------------------------------------------

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


class SpecDecodeFacts(BaseModel):
    model_config = ConfigDict(frozen=True)
    spec_method: str | None = None
    num_speculative_tokens: int | None = None
    spec_acceptance_rate: float | None = None
    spec_acceptance_per_position: tuple[float, ...] = ()
    spec_mean_acceptance_length: float | None = None
    spec_acceptance_rate_all: float | None = None
    spec_metrics_lines: int = 0


@dataclass
class _SpecAsked:
    """The speculative method and draft length the log says were asked for: the first line that
    says each one wins."""

    method: str | None = None
    num: str | None = None

    def offer(self, method: str | None = None, num: str | None = None) -> None:
        if self.method is None:
            self.method = method
        if self.num is None:
            self.num = num

    def offer_field(self, key: str, value: str) -> None:
        """A `_SPEC_FIELD` match: `method`, or one of the draft length's names."""
        if key == "method":
            self.offer(method=value)
        else:
            self.offer(num=value)


class SpecDecodeReader(Reader):
    """The method and draft length (config dump, non-default args, command line) and the
    acceptance (`SpecDecoding metrics`, V0 `Speculative metrics`), field by field."""

    words = "speculative|Speculative|SpecDecoding|non-default"

    def __init__(self) -> None:
        self.spec = _SpecAsked()
        self.rate: float | None = None
        self.pos: list[float] = []
        self.mean: float | None = None
        self.acc = self.drafted = self.lines = 0

    def read(self, ln: LogLine, msg: str, cx: Context) -> None:
        ev, spec = cx.evidence, self.spec
        if "non-default args" in msg and (m := _NON_DEFAULT.search(msg)):
            if parsed := _parse_args(m.group("dict")):
                spec.offer(*_spec_from_args(parsed))

        if "speculative" not in msg:
            pass
        elif m := _SPEC_CONFIG.search(msg):
            for f in _SPEC_FIELD.finditer(m.group("body")):
                spec.offer_field(f.group("key"), f.group("value"))
            ev.setdefault("speculative_config", m.group(0))
        elif "SpecDecoding" not in msg:
            # a command line (`--speculative-config '{"method": ...}'`) or an older config repr
            tail = msg[msg.index("speculative") :]
            for f in _SPEC_FIELD.finditer(tail):
                spec.offer_field(f.group("key"), f.group("value"))
        if "Speculative metrics" in msg and (m := _SPEC_METRICS_V0.search(msg)):
            self.lines += 1
            if m.group("rate") != "nan":
                self.rate, self.pos, self.mean = float(m.group("rate")), [], None
                ev["spec_decode_metrics"] = msg
            if m.group("k"):
                spec.offer(num=m.group("k"))
        if "SpecDecoding metrics" in msg and (m := _SPEC_METRICS.search(msg)):
            rate, pos, mean, acc, drafted = _spec_metrics(m.group("body"))
            self.lines += 1
            self.acc, self.drafted = self.acc + acc, self.drafted + drafted
            if rate is not None:
                self.rate, self.pos, self.mean = rate, pos, mean
                ev["spec_decode_metrics"] = msg

    def facts(self) -> SpecDecodeFacts:
        n = self.spec.num or ""
        return SpecDecodeFacts(
            spec_method=self.spec.method,
            num_speculative_tokens=int(n) if n.isdigit() else None,
            spec_acceptance_rate=_rounded(self.rate),
            spec_acceptance_per_position=tuple(self.pos),
            spec_mean_acceptance_length=self.mean,
            spec_acceptance_rate_all=_rounded(self.acc / self.drafted) if self.drafted else None,
            spec_metrics_lines=self.lines,
        )


def _rounded(x: float | None) -> float | None:
    return None if x is None else round(x, 6)


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


def _spec_from_args(args: NonDefaultArgs) -> tuple[str | None, str | None]:
    """(method, draft length) from `non-default args`: its `speculative_config` (a dict or its
    JSON), else the flattened `spec_method` / `spec_tokens` of 0.26 dev builds."""
    spec = args.speculative_config
    if spec is None and (args.spec_method or args.spec_tokens):
        spec = SpeculativeArgs.model_validate({"method": args.spec_method, "num_speculative_tokens": args.spec_tokens})
    if isinstance(spec, str):
        try:
            parsed = json.loads(spec)
        except (ValueError, RecursionError):
            parsed = None
        spec = SpeculativeArgs.model_validate(parsed) if isinstance(parsed, dict) else None
    if spec is None:
        return None, None
    method = str(spec.method) if spec.method else None
    num = str(spec.num) if spec.num is not None else None
    return method, num
