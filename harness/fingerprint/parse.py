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
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from typing import Any

from harness.fingerprint.lines import LogLine, split_lines
from harness.fingerprint.tables import KernelNames, kernel_names, signatures

_MOE = re.compile(
    r"Using '?(?P<backend>[A-Z][A-Z0-9_]*)'? (?P<quant>[A-Za-z0-9]+) MoE backend out of potential backends"
)
_NVFP4_GEMM = re.compile(r"Using (?P<kernel>[\w.]+) for NVFP4 GEMM")
_SELECTED = re.compile(r"Selected (?P<kernel>\w+Kernel) for (?P<what>\S.*?)\s*$")
_ATTN_AUTO = re.compile(
    r"Using (?P<name>[A-Z][A-Z0-9_]*) attention backend out of potential backends"
)
_ATTN_EXPLICIT = re.compile(
    r"^Using (?:AttentionBackendEnum\.)?(?P<name>[A-Z][A-Z0-9_]*) backend\.?\s*$"
)
_ATTN_LEGACY = re.compile(
    r"^Using (?P<name>[\w ]+?) backend(?: with \w+ KV cache layout)? on V1 engine"
)
_CG_CONFIG = re.compile(
    r"""['"]cudagraph_mode['"]\s*:\s*(?:<CUDAGraphMode\.(?P<name>\w+)[^>]*>|(?P<num>\[\s*\d\s*,\s*\d\s*\]|\d)|['"](?P<str>\w+)['"]|None)"""
)
_CG_DOWNGRADE = re.compile(r"setting cudagraph_mode\s*=\s*(?P<mode>[A-Z_]+)")
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
_VERSION = (
    re.compile(r"Initializing a V1 LLM engine \(v(?P<v>[^)\s]+)\)"),
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


@dataclass(frozen=True)
class Fingerprint:
    """What one vLLM log proves. Absent facts are None / empty, never guessed."""

    moe_backend: str | None = None
    moe_quant: str | None = None
    linear_kernels: tuple[str, ...] = ()
    attention_backend: str | None = None
    cudagraph_mode: str | None = None
    kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    autotuner_skipped: tuple[tuple[str, int], ...] = ()
    requested: dict[str, str | None] = field(default_factory=dict)
    requested_source: str | None = None
    mismatches: tuple[dict[str, str], ...] = ()
    signatures: tuple[str, ...] = ()
    vllm_version: str | None = None
    model_load_gib: float | None = None
    model_load_s: float | None = None
    graph_capture_s: float | None = None
    graph_capture_gib: float | None = None
    capture_started: bool = False
    evidence: dict[str, str] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "moe_backend": self.moe_backend,
            "moe_quant": self.moe_quant,
            "linear_kernels": list(self.linear_kernels),
            "attention_backend": self.attention_backend,
            "cudagraph_mode": self.cudagraph_mode,
            "kv_cache_tokens": self.kv_cache_tokens,
            "max_concurrency": self.max_concurrency,
            "autotuner_skipped": [{"op": op, "count": n} for op, n in self.autotuner_skipped],
            "requested": {
                "moe_backend": self.requested.get("moe_backend"),
                "linear_backend": self.requested.get("linear_backend"),
                "attention_backend": self.requested.get("attention_backend"),
                "source": self.requested_source,
            },
            "mismatches": [dict(m) for m in self.mismatches],
            "signatures": list(self.signatures),
            "vllm_version": self.vllm_version,
            "model_load_gib": self.model_load_gib,
            "model_load_s": self.model_load_s,
            "graph_capture_s": self.graph_capture_s,
            "graph_capture_gib": self.graph_capture_gib,
            "capture_started": self.capture_started,
            "evidence": dict(self.evidence),
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


def _match_signatures(lines: list[LogLine], process_ended: bool) -> list[tuple[str, LogLine]]:
    hits: list[tuple[str, LogLine]] = []
    for sig in signatures():
        first = next((ln for ln in lines if sig.pattern.search(ln.message)), None)
        if first is None:
            continue
        if not all(any(r.search(ln.message) for ln in lines) for r in sig.requires):
            continue
        if sig.unless_after is not None:
            if not process_ended:
                continue
            if any(sig.unless_after.search(ln.message) for ln in lines if ln.number > first.number):
                continue
        hits.append((sig.id, first))
    return hits


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


def fingerprint(text: str, *, process_ended: bool = True) -> Fingerprint:
    """Read a vLLM log. `process_ended=False` when the server may still be running: then an
    unfinished CUDA-graph capture is not yet a hang."""
    names = kernel_names()
    lines = split_lines(text)
    ev: dict[str, str] = {}

    moe = quant = attention = cg_mode = version = None
    linear: list[str] = []
    kv_tokens: int | None = None
    max_conc: float | None = None
    load_gib = load_s = cap_s = cap_gib = None
    skipped: dict[str, int] = {}
    requested_args: dict[str, str] = {}
    env: dict[str, str] = {}
    unknown_env: dict[str, str] = {}
    capture_started = False

    for ln in lines:
        msg = ln.message
        if m := _MOE.search(msg):
            moe, quant = m.group("backend"), m.group("quant").lower()
            ev["moe_backend"] = msg
        for rx in (_NVFP4_GEMM, _SELECTED):
            if (m := rx.search(msg)) and m.group("kernel") not in linear:
                linear.append(m.group("kernel"))
                ev.setdefault("linear_kernels", msg)
                ev[f"linear:{m.group('kernel')}"] = msg
        if m := _ATTN_AUTO.search(msg) or _ATTN_EXPLICIT.search(msg):
            attention = m.group("name")
            ev["attention_backend"] = msg
        elif (m := _ATTN_LEGACY.search(msg)) and m.group("name") in names.attention_legacy:
            attention = names.attention_legacy[m.group("name")]
            ev["attention_backend"] = msg
        if (m := _CG_CONFIG.search(msg)) and "cudagraph_mode" not in ev:
            if m.group("name"):
                cg_mode = m.group("name")
            elif m.group("num"):
                cg_mode = _CG_BY_VALUE.get(re.sub(r"\s", "", m.group("num")))
            elif m.group("str"):
                cg_mode = m.group("str").upper()
            else:
                cg_mode = "NONE"
            ev["cudagraph_mode"] = msg[max(0, m.start() - 40) : m.end() + 10]
        if m := _CG_DOWNGRADE.search(msg):
            cg_mode = m.group("mode")
            ev["cudagraph_mode"] = msg
        if m := _KV_TOKENS.search(msg):
            kv_tokens = _number(m.group("tokens"))
            ev["kv_cache_tokens"] = msg
        if m := _MAX_CONC.search(msg):
            max_conc = float(m.group("x"))
            ev["max_concurrency"] = msg
        if m := _MODEL_LOAD.search(msg):
            load_gib, load_s = float(m.group("gib")), float(m.group("s"))
            ev["model_load"] = msg
        if "Capturing CUDA graphs" in msg:
            capture_started = True
        if m := _GRAPH_DONE.search(msg):
            cap_s, cap_gib = float(m.group("s")), float(m.group("gib"))
            ev["graph_capture"] = msg
        if m := _AUTOTUNER.search(msg):
            op, n = m.group("op"), int(m.group("n"))
            if n > skipped.get(op, -1):
                skipped[op] = n
                ev[f"autotuner:{op}"] = msg[m.start() :]
        if version is None:
            for rx in _VERSION:
                if m := rx.search(msg):
                    version = m.group("v")
                    ev["vllm_version"] = msg[: m.end()]
                    break
        if m := _NON_DEFAULT.search(msg):
            if parsed := _parse_dict(m.group("dict")):
                requested_args.update(_requested_from_args(parsed))
                ev["requested"] = msg
        elif "kernel_config=" in msg or "KernelConfig(" in msg:
            for m in _KERNEL_CONFIG_FIELD.finditer(msg):
                if m.group("value").lower() != "auto":
                    requested_args.setdefault(m.group("key"), m.group("value"))
                    ev.setdefault("requested", msg)
        for m in _ENV.finditer(ln.raw):
            env[m.group("name")] = m.group("value")
            ev.setdefault("requested_env", ln.raw.strip())
        if m := _UNKNOWN_ENV.search(msg):
            unknown_env[m.group("name")] = msg

    requested: dict[str, str] = dict(requested_args)
    source = "args" if requested_args else None
    env_requested = _requested_from_env(env, names)
    for key, value in env_requested.items():
        if key not in requested:
            requested[key] = value
            source = "env" if source is None else "args+env"

    mismatches = _mismatches(requested, moe, quant, linear, attention, names)
    # An env var the release no longer knows is a request that was dropped on the floor.
    for var, line in unknown_env.items():
        if var in env:
            what = "linear_backend" if var == "VLLM_NVFP4_GEMM_BACKEND" else "moe_backend"
            mismatches.append(
                {"what": what, "asked": f"{var}={env[var]}", "got": f"ignored ({line})"}
            )

    hits = _match_signatures(lines, process_ended)
    for sig_id, ln in hits:
        ev[f"signature:{sig_id}"] = ln.message

    return Fingerprint(
        moe_backend=moe,
        moe_quant=quant,
        linear_kernels=tuple(linear),
        attention_backend=attention,
        cudagraph_mode=cg_mode,
        kv_cache_tokens=kv_tokens,
        max_concurrency=max_conc,
        autotuner_skipped=tuple(skipped.items()),
        requested={k: requested.get(k) for k in _REQUEST_KEYS.values()},
        requested_source=source,
        mismatches=tuple(mismatches),
        signatures=tuple(sig_id for sig_id, _ in hits),
        vllm_version=version,
        model_load_gib=load_gib,
        model_load_s=load_s,
        graph_capture_s=cap_s,
        graph_capture_gib=cap_gib,
        capture_started=capture_started,
        evidence=ev,
    )
