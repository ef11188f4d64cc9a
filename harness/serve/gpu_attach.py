"""How a serving container gets the GPU and the network, from the matrix's [host] and [serve].

Three ways to attach a GPU (the matrix chooses one per host; `harness doctor` says which work):

- runtime: the NVIDIA Container Toolkit (`docker run --gpus`): a DeviceRequest with the 'gpu'
  capability. The default on a DGX Spark or an RTX workstation with the toolkit installed.
- cdi: Container Device Interface names (`docker run --device nvidia.com/gpu=all`), Docker >= 25
  with a CDI spec (`nvidia-ctk cdi generate`) in one of the engine's CDISpecDirs.
- devices: for an engine with neither (an H200 VM with Debian's dockerd and no NVIDIA container toolkit): the
  /dev/nvidia* nodes themselves, the driver's user-space folders bind-mounted read-only at the
  same path, and LD_LIBRARY_PATH pointing into them so libcuda is found.

Network: 'bridge' publishes the server's port on 127.0.0.1; 'host' lets vLLM bind the port on
the host itself (an engine without a bridge: no iptables), so the port must be free first.
"""

from __future__ import annotations

import socket
from pathlib import Path

from harness.errors import ConfigError, EngineError


def network(matrix) -> str:
    return matrix.spec.serve.network or matrix.spec.host.network


def library_path(host) -> tuple[str, ...]:
    if host.library_path is not None:
        return tuple(host.library_path)
    return tuple(f"{d.rstrip('/')}/{sub}" for d in host.driver_dirs for sub in ("lib64", "lib"))


def serve_fields(matrix) -> dict:
    """Keyword arguments for ServeSpec (docker runner) and the extra env and mounts they need.

    Returns {"spec": {...ServeSpec fields...}, "env": {...}, "mounts": (...)}.
    """
    host = matrix.spec.host
    gpus = None if matrix.spec.serve.gpus == "none" else matrix.spec.serve.gpus
    env: dict[str, str] = {}
    mounts: tuple[tuple[str, str, str], ...] = ()
    devices: tuple[str, ...] = ()
    if gpus and host.gpu_attach == "devices":
        if not host.devices:
            raise ConfigError("[host].devices is empty but gpu_attach = 'devices'",
                              hint="list the device nodes, e.g. devices = [\"/dev/nvidia0\", \"/dev/nvidiactl\", "
                              "\"/dev/nvidia-uvm\"] (`harness doctor` lists what this host has)")
        devices = tuple(f"{d}:{d}:rwm" for d in host.devices)
        mounts = tuple((d, d, "ro") for d in host.driver_dirs)
        if lib := library_path(host):
            env["LD_LIBRARY_PATH"] = ":".join(lib)
    if matrix.spec.serve.vllm_cache:
        mounts += ((matrix.spec.serve.vllm_cache, "/root/.cache/vllm", "rw"),)
    return {
        "spec": {
            "gpus": gpus,
            "gpu_attach": host.gpu_attach,
            "devices": devices,
            "cdi_devices": tuple(host.cdi_devices) if host.gpu_attach == "cdi" else (),
            "network": network(matrix),
            "security_opt": tuple(host.security_opt),
        },
        "env": env,
        "mounts": mounts,
    }


def describe(spec: dict) -> str:
    """One line for the server log's header: how the container got the GPU and the network."""
    parts = [f"gpu_attach={spec['gpu_attach'] if spec['gpus'] else 'none'}", f"network={spec['network']}",
             f"security_opt={','.join(spec['security_opt']) or 'default'}"]
    if spec["devices"]:
        parts.append("devices=" + ",".join(d.split(":")[0] for d in spec["devices"]))
    if spec["cdi_devices"]:
        parts.append("cdi=" + ",".join(spec["cdi_devices"]))
    return "# container: " + " ".join(parts)


def port_free(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        # as uvicorn binds: SO_REUSEADDR, so a just-stopped server's TIME_WAIT is not "in use"
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def require_port_free(port: int) -> None:
    """Host networking: vLLM binds the host's port itself, so a busy port would fail late."""
    if not port_free(port):
        raise EngineError(f"port {port} is already in use on this host (host networking binds it directly)",
                          hint="stop what listens there (`ss -ltnp | grep :PORT`), or set [serve].port / host_port")


def existing(paths) -> tuple[list[str], list[str]]:
    have = [p for p in paths if Path(p).exists()]
    return have, [p for p in paths if p not in have]
