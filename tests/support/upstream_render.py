"""Render an upstream message template (harness/fingerprint/upstream.py) into log lines, the
way vLLM of several eras would have printed it, with sample values for its placeholders.

The samples are chosen from the placeholder's source expression and conversion: a backend or
kernel name for `backend`/`kernel`/`cls` expressions, a token count for `tokens`/`blocks`, a
list for `backends`/`candidates`... Several sample sets are tried (enum-like names, class names,
prose names) because one expression (`backend`) is printed as `FLASH_ATTN` by one release and
`FlashAttentionBackend` by another.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator

# (regex on the lower-cased expression, sample per variant: enum-like, class-like, prose)
_SAMPLES: tuple[tuple[re.Pattern[str], tuple[object, ...]], ...] = tuple(
    (re.compile(rx), values)
    for rx, values in (
        (r"acceptance|accept_rate|rate\b", (59.4, 0.594, 59.4)),
        (r"\bop\b|op_name|custom_op|\.op\b", ("trtllm::fused_moe::gemm2",)),
        (r"tactic|count\b|_count|num_skipped|skipped", (10,)),
        (r"backends|candidates|available|potential|priorit|supported|\[.* for .* in ", (
            "['FLASH_ATTN', 'TRITON_ATTN']", "['FLASH_ATTN', 'TRITON_ATTN']",
            "['FLASH_ATTN', 'TRITON_ATTN']")),
        (r"tokens|num_gpu_blocks|blocks|kv_cache_size|cache_size|max_model_len|model_len|seq_len", (
            872960,)),
        (r"concurrency|max_conc", (426.25,)),
        (r"secs|seconds|elapsed|time|duration|\bs\b", (12.5,)),
        (r"gib|memory|mem\b|bytes|size", (1.5,)),
        (r"mode", ("FULL_AND_PIECEWISE", "PIECEWISE", "FULL")),
        (r"kernel|cls|__name__|class|impl|method|scheme", (
            "CutlassNvFp4LinearKernel", "MarlinLinearKernel", "FLASHINFER_CUTLASS")),
        (r"backend|name|selected|attn|choice", (
            "FLASHINFER_CUTLASS", "FlashInferCutlassNvFp4LinearKernel", "FlashInfer")),
        (r"quant|dtype|format|fmt", ("NVFP4", "fp8", "MXFP4")),
    )
)
_DEFAULT: tuple[object, ...] = ("FLASHINFER_CUTLASS", "CutlassNvFp4LinearKernel", "FlashInfer")
VARIANTS = 3


def sample(field: str, variant: int) -> str:
    """The text a placeholder `"<conv>:<expression>"` renders to in the given variant."""
    conv, _, expr = field.partition(":")
    low = expr.lower()
    values = next((v for rx, v in _SAMPLES if rx.search(low)), _DEFAULT)
    value = values[variant % len(values)]
    kind = conv[-1:] if conv[-1:] in "diouxXeEfFgGcrsa" else ""
    if kind in "dioxX" and kind:
        value = int(value) if isinstance(value, (int, float)) else 7
    elif kind in "eEfFgG" and kind:
        value = float(value) if isinstance(value, (int, float)) else 1.5
    spec = conv[:-1] if kind else conv
    if conv.startswith("r"):
        return repr(value)
    try:
        if kind in ("s", "a", ""):
            return format(value, spec) if spec else str(value)
        return format(value, spec + ("d" if kind in "iu" else kind))
    except (ValueError, TypeError):
        return str(value)


def render(template: str, fields: list[str], variant: int) -> str:
    return template.format(*(sample(f, variant) for f in fields))


def eras(message: str, level: str, at: str) -> Iterator[tuple[str, str]]:
    """(era name, log text) of one message as each vLLM era printed it. A raised message is the
    last line of a traceback; a multi-line message keeps the prefix on its first line only."""
    path, _, line = at.rpartition(":")
    base = path.rsplit("/", 1)[-1]
    if level == "RAISE":
        exc = "RuntimeError"
        tb = [
            "Traceback (most recent call last):",
            f'  File "/usr/local/lib/python3.12/dist-packages/{path}", line {line}, in run',
            "    raise " + exc + "(msg)",
            f"{exc}: {message}",
        ]
        yield "bare", "\n".join(tb)
        for proc in ("EngineCore_0 pid=12", "VllmWorker TP1 pid=3", "APIServer pid=1"):
            yield proc.split()[0], "\n".join(f"({proc}) {t}" for t in tb)
        yield "json", json.dumps({"message": "\n".join(tb), "levelname": "ERROR",
                                  "processName": "EngineCore_DP0"})
        return
    first, _, rest = message.partition("\n")
    tail = ("\n" + rest) if rest else ""
    head = f"{level} 05-12 10:00:00 [{base}:{line}] {first}"
    yield "plain", head + tail
    yield "EngineCore_0", f"(EngineCore_0 pid=12) {head}" + tail
    yield "VllmWorker", f"(VllmWorker TP1 pid=3) {head}" + tail
    yield "json", json.dumps({"message": message, "levelname": level, "processName": "EngineCore_DP0",
                              "filename": base, "lineno": int(line) if line.isdigit() else 0})
