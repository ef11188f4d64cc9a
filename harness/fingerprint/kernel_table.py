"""Check harness/data/kernel_names.toml against a vLLM source tree (an unpacked sdist).

    python -m harness.fingerprint.kernel_table /tmp/sd/vllm-0.33.0

Reads, with `ast` (never imports vLLM): the flag -> backend dicts of `map_nvfp4_backend()` and
`map_fp8_backend()` (fused_moe/oracle/nvfp4.py, fp8.py) and `_LINEAR_BACKEND_KERNEL_MAP`
(kernels/linear/__init__.py). Prints every name the source has and the TOML lacks; exit 1 when
something is missing, so a new release's additions are a diff to paste, not a guess.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

from harness.fingerprint.tables import kernel_names

_NVFP4 = "vllm/model_executor/layers/fused_moe/oracle/nvfp4.py"
_FP8 = "vllm/model_executor/layers/fused_moe/oracle/fp8.py"
_LINEAR = "vllm/model_executor/kernels/linear/__init__.py"


def _function_mapping(path: Path, func: str) -> dict[str, str]:
    """`mapping = {"flag": Enum.NAME, ...}` inside `def func`: flag -> NAME."""
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.FunctionDef) and node.name == func:
            for sub in ast.walk(node):
                if isinstance(sub, ast.Dict) and sub.keys:
                    return {
                        k.value: v.attr
                        for k, v in zip(sub.keys, sub.values, strict=True)
                        if isinstance(k, ast.Constant) and isinstance(k.value, str) and isinstance(v, ast.Attribute)
                    }
    return {}


def _linear_map(path: Path) -> dict[str, set[str]]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and node.target.id == "_LINEAR_BACKEND_KERNEL_MAP"
            and isinstance(node.value, ast.Dict)
        ):
            return {
                k.value: {e.id for e in v.elts if isinstance(e, ast.Name)}
                for k, v in zip(node.value.keys, node.value.values, strict=True)
                if isinstance(k, ast.Constant) and isinstance(k.value, str) and isinstance(v, ast.Set)
            }
    return {}


def missing(root: Path) -> list[str]:
    """Lines `table flag: NAME` for each source name the TOML does not list."""
    names = kernel_names()
    out: list[str] = []
    for label, rel, func, table in (
        ("moe.nvfp4", _NVFP4, "map_nvfp4_backend", names.moe_nvfp4),
        ("moe.fp8", _FP8, "map_fp8_backend", names.moe_fp8),
    ):
        listed = {(flag, name) for flag, listed_names in table.items() for name in listed_names}
        for flag, name in _function_mapping(root / rel, func).items():
            if (flag, name) not in listed:
                out.append(f"{label} {flag}: {name}")
    # Before 0.25 the linear backend was an env var (VLLM_NVFP4_GEMM_BACKEND), with no map.
    linear_path = root / _LINEAR
    linear_map = _linear_map(linear_path) if linear_path.is_file() else {}
    linear_listed = {(flag, kernel) for flag, kernels in names.linear.items() for kernel in kernels}
    for flag, kernels in linear_map.items():
        for kernel in sorted(k for k in kernels if (flag, k) not in linear_listed):
            out.append(f"linear.kernels {flag}: {kernel}")
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1 or not (Path(args[0]) / _NVFP4).is_file():
        print(
            "usage: python -m harness.fingerprint.kernel_table UNPACKED_VLLM_SDIST", file=sys.stderr
        )
        return 2
    gaps = missing(Path(args[0]))
    for line in gaps:
        print(line)
    print(f"{len(gaps)} name(s) missing from harness/data/kernel_names.toml", file=sys.stderr)
    return 1 if gaps else 0


if __name__ == "__main__":
    sys.exit(main())
