"""Files that a stack says must hold GPU kernels: finding no CUDA code in one is a failure.

Matched against the audited path (a wheel member shows as `wheel.whl!pkg/lib.so`). Each
rule says why, in the words the verdict prints. Layouts read from the real wheels:
vllm 0.25.1 / 0.33.0 (`vllm/_C_stable_libtorch.abi3.so`, `vllm/_moe_C_stable_libtorch.abi3.so`;
older releases `vllm/_C.abi3.so`, `vllm/_moe_C.abi3.so`), flashinfer-jit-cache (AOT modules
under `flashinfer_jit_cache/jit_cache/`), bitsandbytes 0.50.2 (`libbitsandbytes_cudaXYZ.so`).
"""

from __future__ import annotations

import re

REQUIRED: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?:^|[/!])vllm/_C(?:_stable_libtorch)?\.[\w.-]*so$"), "vLLM's _C extension holds its custom CUDA kernels"),
    (re.compile(r"(?:^|[/!])vllm/_moe_C(?:_stable_libtorch)?\.[\w.-]*so$"), "vLLM's _moe_C extension holds its MoE CUDA kernels"),
    (re.compile(r"(?:^|[/!])flashinfer_jit_cache/.*\.so$"), "a FlashInfer AOT module is compiled CUDA code"),
    (re.compile(r"(?:^|[/!])bitsandbytes/libbitsandbytes_cuda\d+\.so$"), "a bitsandbytes CUDA library holds its kernels"),
)


def must_hold_kernels(path: str) -> str | None:
    """Why the file at `path` must hold CUDA kernels, or None when nothing says so."""
    for pattern, why in REQUIRED:
        if pattern.search(path):
            return why
    return None
