"""The exact `vllm serve` command and environment of a cell.

Kernel choices go in the form the stack's vLLM understands: `--moe-backend/--linear-backend`
flags (vllm/config/kernel.py, 0.2x and later) or, for older stacks, the VLLM_USE_FLASHINFER_MOE_*
/ VLLM_FLASHINFER_MOE_BACKEND / VLLM_NVFP4_GEMM_BACKEND variables, whose values come from the
same table the fingerprint reads (harness/data/kernel_names.toml), reversed. A request that the
stack's form cannot express is a ConfigError before anything starts.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from harness.errors import ConfigError
from harness.fingerprint.tables import kernel_names
from harness.matrix.model import Quantization, Serve, is_local_checkpoint
from harness.matrix.paths import mount_problem
from harness.matrix.plan import Cell

# vLLM's CLI entry point as a module, so the command works whether or not `vllm` is on PATH.
VLLM_MODULE = ("-m", "vllm.entrypoints.cli.main")


@dataclass(frozen=True)
class ServeCommand:
    args: tuple[str, ...]  # everything after `vllm`
    env: dict[str, str]
    model_path: str  # what vLLM is given as the model (a path inside the container for docker)
    served_name: str
    port: int
    identity: str | None = None  # a second served name, unique to this cell: proves whose server answers

    def shell(self, python: str = "python3") -> str:
        import shlex

        return shlex.join([python, *VLLM_MODULE, *self.args])


# the variable that turns FlashInfer's MoE on for a weight format, in older vLLM (none for bf16)
MOE_USE_VAR: dict[Quantization, str | None] = {"nvfp4": "VLLM_USE_FLASHINFER_MOE_FP4",
                                              "fp8": "VLLM_USE_FLASHINFER_MOE_FP8", "bf16": None}


def env_for_kernels(quant: Quantization, moe: str | None, linear: str | None) -> dict[str, str]:
    """VLLM_* variables that ask an older vLLM for these kernels."""
    names = kernel_names()
    env: dict[str, str] = {}
    flag_of = {v: k for k, v in names.moe_env_backend.items()}  # flag value -> env value
    if moe and moe != "auto":
        use_var = MOE_USE_VAR[quant]
        if moe.startswith("flashinfer") and use_var:
            env[use_var] = "1"
            if moe in flag_of:
                env["VLLM_FLASHINFER_MOE_BACKEND"] = flag_of[moe]
            elif moe != "flashinfer":
                raise ConfigError(
                    f"moe_backend '{moe}' has no environment-variable form for older vLLM "
                    f"(known: flashinfer, {', '.join(sorted(flag_of))})",
                    hint="use kernel_selection = \"flags\" for this stack, or another backend",
                )
        elif moe == "marlin" and quant == "fp8":
            env["VLLM_TEST_FORCE_FP8_MARLIN"] = "1"
        elif use_var and moe in ("cutlass", "triton"):
            env[use_var] = "0"  # not FlashInfer: vLLM's own kernels
        else:
            raise ConfigError(
                f"moe_backend '{moe}' for {quant} cannot be asked for with environment variables",
                hint="use kernel_selection = \"flags\" (vLLM 0.2x and later) for this request",
            )
    if linear and linear != "auto":
        lin_env = {v: k for k, v in names.linear_env_backend.items()}
        if quant != "nvfp4" or linear not in lin_env:
            raise ConfigError(
                f"linear_backend '{linear}' has no environment-variable form "
                f"(VLLM_NVFP4_GEMM_BACKEND takes: {', '.join(sorted(lin_env.values()))}, for NVFP4 only)",
                hint="use kernel_selection = \"flags\" for this stack",
            )
        env["VLLM_NVFP4_GEMM_BACKEND"] = lin_env[linear]
    return env


def model_path(cell: Cell, matrix_dir: Path) -> str:
    """The hub id, or the resolved local folder (what a docker runner bind-mounts).

    The loader kept the folder inside the matrix's repository (or allowed it out); it is checked
    again here, just before it is served, because the folder may have changed since."""
    ckpt = cell.model.checkpoint
    if not is_local_checkpoint(ckpt):
        return ckpt
    folder = matrix_dir / ckpt
    if (why := mount_problem(folder)) is not None:
        raise ConfigError(f"models.{cell.model_name}.checkpoint: {why}",
                          hint="name the model's own folder (the one with config.json)")
    return str(folder.resolve())


def model_cache(serve: Serve) -> str | None:
    """serve.model_cache, checked again just before it is bind-mounted (see model_path)."""
    if serve.model_cache is None:
        return None
    if (why := mount_problem(Path(serve.model_cache))) is not None:
        raise ConfigError(f"serve.model_cache: {why}", hint="name the cache folder itself")
    return serve.model_cache


def build(cell: Cell, serve: Serve, *, matrix_dir: Path, port: int, host: str = "127.0.0.1",
          model_override: str | None = None, identity: str | None = None) -> ServeCommand:
    if not 1 <= port <= 65535:
        raise ConfigError(f"port {port} is not a TCP port", hint="use 1..65535 (serve.port / serve.host_port)")
    model = model_override or model_path(cell, matrix_dir)
    served = cell.served_name
    # vLLM serves every name given (and lists each in /v1/models): the second one is the cell's
    # own, so readiness can tell this cell's server from another left on the same port.
    names = [served, identity] if identity else [served]
    args: list[str] = [
        "serve", model,
        "--served-model-name", *names,
        "--host", host,
        "--port", str(port),
        "--max-model-len", str(cell.model.max_model_len),
        "--gpu-memory-utilization", str(serve.gpu_memory_utilization),
    ]
    if cell.model.load_format != "auto":
        args += ["--load-format", cell.model.load_format]
    args += list(cell.model.args)
    local_env = cell.stack.local.env if cell.stack.local else {}
    env: dict[str, str] = {**local_env, **cell.stack.env}
    cfg = cell.config
    if cell.stack.kernel_selection == "flags":
        if cfg.moe_backend:
            args += ["--moe-backend", cfg.moe_backend]
        if cfg.linear_backend:
            args += ["--linear-backend", cfg.linear_backend]
    else:
        env.update(env_for_kernels(cell.quantization, cfg.moe_backend, cfg.linear_backend))
    if cfg.attention_backend:
        args += ["--attention-backend", cfg.attention_backend]
    if cfg.cudagraph_mode:
        args += ["--compilation-config", json.dumps({"cudagraph_mode": cfg.cudagraph_mode})]
    args += list(cfg.args)
    env.update(cfg.env)
    return ServeCommand(tuple(args), env, model, served, port, identity)
