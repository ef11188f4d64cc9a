"""`harness env`: the host half of a bug report's fingerprint.

GPU names, compute capability, driver and CUDA driver version, kernel, OS release, Docker and
NVIDIA Container Toolkit versions. Nothing here reads environment variables or files that could
hold a secret.
"""

from __future__ import annotations

import json
import platform
from pathlib import Path

from harness import gpus, proc
from harness.console import out


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


def host_fingerprint() -> dict:
    probe = gpus.probe()
    first = probe.gpus[0] if probe.gpus else None
    return {
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
    }


def register(sub) -> None:
    p = sub.add_parser("env", help="print the host fingerprint (GPU, driver, kernel, OS, Docker)")
    p.add_argument("--json", action="store_true", help="print JSON")
    p.set_defaults(func=run)


def run(args) -> int:
    fp = host_fingerprint()
    if args.json:
        out.print_json(json.dumps(fp))
        return 0
    from rich.text import Text

    from harness.tables import Col, show

    rows = []
    for key, value in fp.items():
        if key == "gpus":
            value = "; ".join(f"{g['index']}: {g['name']} (cc {g['cc']}, {g['memory_gib']} GiB)"
                              for g in value) or "none"
        rows.append([Text(key), Text("-" if value is None else str(value))])
    show(out, "host fingerprint", [Col("key", whole=True), Col("value")], rows)
    return 0
