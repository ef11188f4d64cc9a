"""Memory trend of a soak: is the host (or the GPU) losing memory while a cell serves?

Driver 590.48.01 on a DGX Spark (GB10, 128 GiB unified LPDDR5x) lost 80 of 128 GB with nothing
visible in AnonPages or Slab (a published DGX Spark report). On a unified-memory machine the driver's allocations
come out of system RAM, so /proc/meminfo MemAvailable is THE signal; NVML's per-GPU "used"
is often not supported there and is kept only as a second opinion on discrete GPUs.

`analyse(samples)` is pure (least-squares slopes and the leak rule); `MemWatch` is the thread
that collects the samples.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

GIB = 2**30
# A leak is called only on evidence a soak can give: long enough to outlast start-up noise,
# steep enough to matter (1 GiB/h empties 128 GiB in days, 590.48.01 did it in hours), and a
# good straight-line fit, so that one cache drop or a single allocation is not a trend.
MIN_WINDOW_S = 120.0
MIN_SAMPLES = 5
LEAK_GIB_PER_H = 1.0
MIN_R2 = 0.8

Sample = tuple[float, float | None, float | None]  # (t_s, mem_available_gib, gpu_used_gib)


def read_mem_available_gib(path: Path | str = "/proc/meminfo") -> float:
    """MemAvailable in GiB (the kernel's estimate of what can be allocated without swapping)."""
    for line in Path(path).read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) * 1024 / GIB
    raise ValueError(f"{path} has no MemAvailable line (Linux >= 3.14 prints one)")


def fit(points: Sequence[tuple[float, float]]) -> tuple[float, float] | None:
    """Least-squares slope (per second) and r² of y over x; None with fewer than 2 points
    or no spread in x. r² is 1.0 for a perfectly flat series (nothing left to explain)."""
    n = len(points)
    if n < 2:
        return None
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    sxy = sum((x - mx) * (y - my) for x, y in points)
    syy = sum((y - my) ** 2 for _, y in points)
    slope = sxy / sxx
    r2 = 1.0 if syy == 0 else (sxy * sxy) / (sxx * syy)
    return slope, r2


def analyse(samples: Sequence[Sample | tuple[float, float | None]], interval_s: float | None = None) -> dict:
    """The `memory` record of a cell (docs/results-format.md) from raw samples."""
    rows = [(float(s[0]), s[1], s[2] if len(s) > 2 else None) for s in samples]
    host = [(t, float(h)) for t, h, _ in rows if h is not None]
    gpu = [(t, float(g)) for t, _, g in rows if g is not None]
    host_fit, gpu_fit = fit(host), fit(gpu)
    host_slope = host_fit[0] * 3600 if host_fit else None
    gpu_slope = gpu_fit[0] * 3600 if gpu_fit else None
    window = (host[-1][0] - host[0][0]) if len(host) >= 2 else 0.0

    leak = False
    if len(host) < MIN_SAMPLES or window < MIN_WINDOW_S:
        reason = (
            f"too short to judge a trend: {len(host)} host samples over {window:.0f} s "
            f"(needs >= {MIN_SAMPLES} over >= {MIN_WINDOW_S:.0f} s; soak longer)"
        )
    elif host_fit is not None and host_slope is not None and host_slope < -LEAK_GIB_PER_H \
            and host_fit[1] >= MIN_R2:
        leak = True
        lost = host[0][1] - host[-1][1]
        reason = (
            f"MemAvailable falls steadily at {-host_slope:.2f} GiB/h (r²={host_fit[1]:.2f}, "
            f"{lost:.2f} GiB lost over {window / 60:.1f} min) while the server was up: memory is "
            "leaking; on unified-memory GPUs (GB10) suspect the driver (590.48.01 did this)"
        )
    else:
        r2 = f", r²={host_fit[1]:.2f}" if host_fit else ""
        reason = (
            f"no steady loss: MemAvailable slope {host_slope:+.2f} GiB/h{r2} over "
            f"{window / 60:.1f} min (a leak is < -{LEAK_GIB_PER_H:g} GiB/h with r² >= {MIN_R2})"
        )
    if gpu_slope is not None and gpu_fit and gpu_slope > LEAK_GIB_PER_H and gpu_fit[1] >= MIN_R2:
        reason += f"; GPU memory used grows at {gpu_slope:.2f} GiB/h"

    def r(v: float | None, nd: int = 4) -> float | None:
        return None if v is None else round(v, nd)

    return {
        "interval_s": interval_s,
        "samples": [[r(t, 2), r(h), r(g)] for t, h, g in rows],
        "host_slope_gib_per_h": r(host_slope),
        "gpu_slope_gib_per_h": r(gpu_slope),
        "host_fit_r2": r(host_fit[1]) if host_fit else None,
        "duration_s": round(window, 1),
        "leak": leak,
        "reason": reason,
    }


class _Nvml:
    """Sum of memory used over all GPUs via NVML; None where NVML or the query is missing
    (GB10 answers Not Supported for per-device memory: unified memory has no separate pool)."""

    def __init__(self) -> None:
        self.handles: list[Any] = []
        try:
            import pynvml

            pynvml.nvmlInit()
            self.nvml = pynvml
            self.handles = [
                pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())
            ]
        except Exception:  # noqa: BLE001 - no library, no driver, no GPU: all mean "no figure"
            self.handles = []

    def used_gib(self) -> float | None:
        if not self.handles:
            return None
        try:
            return sum(self.nvml.nvmlDeviceGetMemoryInfo(h).used for h in self.handles) / GIB
        except Exception:  # noqa: BLE001
            return None

    def close(self) -> None:
        if self.handles:
            try:
                self.nvml.nvmlShutdown()
            except Exception:  # noqa: BLE001
                pass


class MemWatch:
    """Sample MemAvailable and GPU memory used every `interval_s` in a daemon thread.

    with MemWatch(interval_s=5) as watch:
        ... serve and benchmark ...
    cell["memory"] = watch.result()
    """

    def __init__(
        self,
        interval_s: float = 5.0,
        *,
        meminfo: Path | str = "/proc/meminfo",
        gpu_reader: Callable[[], float | None] | None = None,
    ) -> None:
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self.interval_s = interval_s
        self.meminfo = meminfo
        self._gpu_reader = gpu_reader
        self._samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._t0 = 0.0
        self._steady_from: float | None = None

    def mark_steady(self) -> None:
        """From now on the server is up: loading weights and allocating the KV cache are over.

        Only samples after this mark are judged, since start-up takes memory by design (seen on
        the H200 test machine: MemAvailable fell 3.2 GiB during a 156 s vLLM start-up).
        """
        self._steady_from = time.monotonic() - self._t0

    def sample(self) -> Sample:
        t = time.monotonic() - self._t0
        try:
            host: float | None = read_mem_available_gib(self.meminfo)
        except (OSError, ValueError):
            host = None
        gpu = self._gpu_reader() if self._gpu_reader else None
        row = (t, host, gpu)
        self._samples.append(row)
        return row

    def _loop(self) -> None:
        nvml = None
        if self._gpu_reader is None:
            nvml = _Nvml()
            self._gpu_reader = nvml.used_gib
        try:
            self.sample()
            while not self._stop.wait(self.interval_s):
                self.sample()
            self.sample()  # the end of the window counts too
        finally:
            if nvml:
                nvml.close()

    def start(self) -> MemWatch:
        if self._thread is not None:
            raise RuntimeError("MemWatch already started")
        self._t0 = time.monotonic()
        self._thread = threading.Thread(target=self._loop, name="memwatch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join(timeout=max(10.0, self.interval_s * 2))

    def __enter__(self) -> MemWatch:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def samples(self) -> list[Sample]:
        return list(self._samples)

    def result(self) -> dict:
        if self._steady_from is None:
            return analyse(self._samples, self.interval_s)
        steady = [row for row in self._samples if row[0] >= self._steady_from]
        out = analyse(steady, self.interval_s)
        out["samples"] = analyse(self._samples, self.interval_s)["samples"]  # keep start-up for plots
        out["steady_from_s"] = round(self._steady_from, 1)
        return out
