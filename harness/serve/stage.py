"""The serve stage: the exact command of a cell, started by its runner, until it is ready.

The runner (Docker or a local python) is chosen by the stack and hidden behind the `Runner` /
`Server` protocol: nothing here branches on how the server runs, beyond where the model and the
port are. A server is ready when `/health` answers and `/v1/models` lists the cell's own
identity name (a per-cell served-model name), so a server left on the port by someone else is
never measured in its place.
"""

from __future__ import annotations

import dataclasses
import secrets
from dataclasses import dataclass
from pathlib import Path

from harness import __version__
from harness.errors import ConfigError
from harness.labels import CELL, ROLE, RUN_ID, Role
from harness.matrix.load import Matrix
from harness.matrix.plan import Cell
from harness.serve import command as serve_cmd
from harness.serve import gpu_attach
from harness.serve.base import Placement, ServeSpec
from harness.serve.gpu_attach import port_free

CONTAINER_MODEL_DIR = "/models"


@dataclass(frozen=True)
class Planned:
    spec: ServeSpec
    command: serve_cmd.ServeCommand


def identity_name() -> str:
    return f"harness-{secrets.token_hex(6)}"


def plan(cell: Cell, matrix: Matrix, *, run_id: str, log_path: Path, image: str | None,
         placement: Placement | None = None, keep_failed: bool = False) -> Planned:
    """The serve spec of a cell: command, env, mounts, labels, identity, on its placement's port
    and GPUs (without one: the matrix's port and serve.gpus)."""
    serve = matrix.spec.serve
    stack = cell.stack
    labels = {RUN_ID: run_id, ROLE: Role.SERVE.value, CELL: cell.id}
    ident = identity_name()
    # a placement's port is where the server listens on the host itself: the slot's own port,
    # never another's (it is then the port inside a container too)
    fixed = placement.port if placement is not None else None
    port, host_port = (fixed, None) if fixed is not None else (serve.port, serve.host_port)
    if stack.runner == "local":
        port = host_port or port
        if not port_free(port):
            raise ConfigError(
                f"port {port} on this host is already in use, before cell {cell.id} started",
                hint="stop what listens there (a server left by a killed run: `harness reap`), or "
                "set serve.host_port to a free port")
        assert stack.local is not None, "the loader gives every local stack its [local] table"
        cmd = serve_cmd.build(cell, serve, matrix_dir=matrix.path.parent, port=port, identity=ident)
        argv = (stack.local.python, *serve_cmd.VLLM_MODULE, *cmd.args)
        mounts: tuple = ()
        attach = None
    else:
        src = serve_cmd.model_path(cell, matrix.path.parent)
        mount_list = []
        override = None
        # a local checkpoint (model_path resolved and checked it; a hub id is never absolute, even
        # when a folder of that name happens to sit in the working directory): mount it read-only
        if Path(src).is_absolute() and Path(src).is_dir():
            override = f"{CONTAINER_MODEL_DIR}/{cell.model_name}"
            mount_list.append((src, override, "ro"))
        if (cache := serve_cmd.model_cache(serve)) is not None:  # checked again before mounting
            mount_list.append((cache, "/root/.cache/huggingface", "ro"))
        attach = gpu_attach.serve_fields(matrix)  # [host]: GPU attach mode, network, security options
        host_net = attach["spec"]["network"] == "host"  # vLLM binds the host's own port
        cmd = serve_cmd.build(cell, serve, matrix_dir=matrix.path.parent,
                              port=(host_port or port) if host_net else port,
                              host="127.0.0.1" if host_net else "0.0.0.0", model_override=override,
                              identity=ident)
        cmd = dataclasses.replace(cmd, env={**attach["env"], **cmd.env})
        argv = ("python3", *serve_cmd.VLLM_MODULE, *cmd.args)
        mounts = tuple(mount_list) + attach["mounts"]
    header = (f"# harness {__version__} run {run_id} cell {cell.id}",
              "# command: " + " ".join(argv),
              *(f"{k}={v}" for k, v in sorted(cmd.env.items())),
              *((gpu_attach.describe(attach["spec"]),) if attach else ()))
    spec = ServeSpec(cell_id=cell.id, argv=argv, env=cmd.env, port=cmd.port, log_path=log_path,
                     labels=labels, image=image, gpus=None if serve.gpus == "none" else serve.gpus,
                     mounts=mounts, shm_size=serve.shm_size, keep_failed=keep_failed, header=header,
                     **({k: v for k, v in attach["spec"].items() if k != "gpus"} if attach else {}))
    gpus = placement.gpus if placement is not None else None
    return Planned(with_gpus(spec, gpus, local=stack.runner == "local"), cmd)


def with_gpus(spec: ServeSpec, gpus: tuple[str, ...] | None, *, local: bool) -> ServeSpec:
    """A server that gets a slot's GPUs only: device ids for a container (one that asks for
    GPUs at all), CUDA_VISIBLE_DEVICES for a local server. None or (): the spec as it is."""
    if not gpus:
        return spec
    ids = ",".join(gpus)
    if local:
        return dataclasses.replace(spec, env={**spec.env, "CUDA_VISIBLE_DEVICES": ids})
    return spec if spec.gpus is None else dataclasses.replace(spec, gpus=ids)
