"""`harness env`: the host half of a bug report's fingerprint.

GPU names, compute capability, driver and CUDA driver version, kernel, OS release, Docker and
NVIDIA Container Toolkit versions. Nothing here reads environment variables or files that could
hold a secret.
"""

from __future__ import annotations

import platform
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from harness import gpus, proc


class GpuRecord(BaseModel):
    """One GPU as `harness env` saw it (harness.gpus.Gpu, stored)."""

    model_config = ConfigDict(frozen=True, extra="allow")

    index: int | None = None
    name: str | None = None
    cc: str | None = None
    memory_gib: float | None = None
    driver: str | None = None
    cuda_driver: str | None = None


class HostFingerprint(BaseModel):
    """This host: run.json `host`, `harness env --json`. Every fact may be absent (None) on a
    host that cannot tell it; unknown keys are kept."""

    model_config = ConfigDict(frozen=True, extra="allow")

    gpus: tuple[GpuRecord, ...] = ()
    gpu_probe: str | None = Field(None, description="nvml | nvidia-smi | none (why)")
    driver: str | None = None
    cuda_driver: str | None = None
    kernel: str | None = None
    arch: str | None = None
    os: str | None = None
    mem_total_gib: float | None = None
    python: str | None = None
    docker: str | None = None
    nvidia_container_toolkit: str | None = None

    @property
    def first_gpu(self) -> GpuRecord | None:
        return self.gpus[0] if self.gpus else None


def _os_release() -> str:
    try:
        for line in Path("/etc/os-release").read_text().splitlines():
            if line.startswith("PRETTY_NAME="):
                return line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return platform.platform()


def _mem_total_gib() -> float | None:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal:"):
                return round(int(line.split()[1]) / 2**20, 1)
    except OSError:
        pass
    return None


def _first_line(argv: list[str]) -> str | None:
    r = proc.run(argv, timeout=20)
    if not r.ok:
        return None
    text = (r.stdout or r.stderr).strip()
    return text.splitlines()[0] if text else None


def docker_version() -> str | None:
    r = proc.run(["docker", "version", "--format", "{{.Server.Version}}"], timeout=20)
    return r.stdout.strip() if r.ok and r.stdout.strip() else None


def host_fingerprint() -> HostFingerprint:
    probe = gpus.probe()
    first = probe.gpus[0] if probe.gpus else None
    return HostFingerprint.model_validate({
        "gpus": [g.to_json() for g in probe.gpus],
        "gpu_probe": probe.source if probe.ok else f"none ({probe.reason})",
        "driver": first.driver if first else None,
        "cuda_driver": first.cuda_driver if first else None,
        "kernel": platform.release(),
        "arch": platform.machine(),
        "os": _os_release(),
        "mem_total_gib": _mem_total_gib(),
        "python": platform.python_version(),
        "docker": docker_version(),
        "nvidia_container_toolkit": _first_line(["nvidia-ctk", "--version"])
        or _first_line(["nvidia-container-cli", "--version"]),
    })
