"""GPUs on this host: NVML first (nvidia-ml-py), `nvidia-smi` when NVML cannot load."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from harness import proc


@dataclass(frozen=True)
class Gpu:
    index: int
    name: str
    cc: str
    memory_gib: float
    driver: str
    cuda_driver: str | None

    def to_json(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class GpuProbe:
    gpus: tuple[Gpu, ...]
    source: str  # "nvml", "nvidia-smi" or "none"
    reason: str  # why none were found, when none were

    @property
    def ok(self) -> bool:
        return bool(self.gpus)


def probe() -> GpuProbe:
    nvml = _from_nvml()
    if isinstance(nvml, GpuProbe):
        return nvml
    smi = _from_smi()
    if isinstance(smi, GpuProbe):
        return smi
    return GpuProbe((), "none", f"NVML: {nvml}; nvidia-smi: {smi}")


def _from_nvml() -> GpuProbe | str:
    try:
        import pynvml
    except ImportError:
        return "nvidia-ml-py is not installed"
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return f"cannot load NVML ({exc}): no NVIDIA driver on this host"
    try:
        driver = _s(pynvml.nvmlSystemGetDriverVersion())
        try:
            v = pynvml.nvmlSystemGetCudaDriverVersion_v2()
            cuda = f"{v // 1000}.{(v % 1000) // 10}"
        except pynvml.NVMLError:
            cuda = None
        gpus = []
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
            try:
                mem = pynvml.nvmlDeviceGetMemoryInfo(h).total / 2**30
            except pynvml.NVMLError:  # GB10 unified memory reports no framebuffer
                mem = 0.0
            gpus.append(Gpu(i, _s(pynvml.nvmlDeviceGetName(h)), f"{major}.{minor}", round(mem, 1),
                            driver, cuda))
        return GpuProbe(tuple(gpus), "nvml", "" if gpus else "NVML sees no GPU")
    finally:
        pynvml.nvmlShutdown()


def _from_smi() -> GpuProbe | str:
    r = proc.run(["nvidia-smi", "--query-gpu=index,name,compute_cap,memory.total,driver_version",
                  "--format=csv,noheader,nounits"], timeout=30)
    if not r.ok:
        return r.stderr.strip() or f"exit {r.returncode}"
    gpus = []
    for line in r.stdout.strip().splitlines():
        idx, name, cc, mem, drv = (x.strip() for x in line.split(","))
        mem_gib = float(mem) / 1024 if mem.replace(".", "").isdigit() else 0.0
        gpus.append(Gpu(int(idx), name, cc, round(mem_gib, 1), drv, None))
    return GpuProbe(tuple(gpus), "nvidia-smi", "" if gpus else "nvidia-smi lists no GPU")


def _s(v) -> str:
    return v.decode() if isinstance(v, bytes) else str(v)


# Memory bandwidth (GB/s) of GPUs a generic matrix may meet, from their makers' data sheets;
# the roofline figures of a generated matrix use it, `harness doctor` and the report compare it with
# the matrix's. Matched on the NVML name, longest first.
KNOWN_BANDWIDTH_GBS = {
    "A100-SXM4-80GB": 2039, "A100 80GB PCIe": 1935, "A100-SXM4-40GB": 1555, "A100-PCIE-40GB": 1555,
    "A10G": 600, "A10": 600, "A30": 933, "A40": 696, "L4": 300, "L40S": 864, "L40": 864,
    "RTX 6000 Ada": 960, "RTX 4090": 1008, "RTX 4080": 717, "RTX 3090": 936, "T4": 320,
    "B200": 8000, "B300": 8000, "GB200": 8000,
    "H100 80GB HBM3": 3350, "H100 PCIe": 2000, "H100 NVL": 3900, "H200": 4800, "H200 NVL": 4800, "GH200": 4000,
    "H800": 3350, "H20": 4000,
}


def known_bandwidth(name: str) -> float | None:
    """The data-sheet bandwidth of a GPU by its NVML name (the longest key it contains), or None."""
    return next((v for k, v in sorted(KNOWN_BANDWIDTH_GBS.items(), key=lambda kv: -len(kv[0]))
                 if k.upper() in name.upper()), None)


def other_bandwidth(name: str, matrix_gbs: float | None) -> float | None:
    """The data-sheet bandwidth of the card named `name` when it is known and more than 10 %
    from the matrix's `matrix_gbs` (an H100 running an H200 matrix: the same cc, so nothing else
    tells them apart), else None. `harness doctor` warns with it; the report's header says it."""
    bw = known_bandwidth(name)
    if bw is None or not matrix_gbs or abs(bw - matrix_gbs) <= 0.1 * matrix_gbs:
        return None
    return bw
