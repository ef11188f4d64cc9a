"""The measure stage: what a ready server is made of and how fast it is.

In order: the image probe (versions and env from inside the server's own environment), the
benchmark, an optional cross-check client, an optional soak while the memory watch samples.
Each figure is saved (`on_partial`) as soon as it exists, so a controller killed mid-cell
loses none of it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path

from harness import proc
from harness.bench.client import bench as run_bench_sync
from harness.bench.settings import BenchSettings
from harness.errors import ConfigError
from harness.matrix.model import Bench
from harness.results.model import BenchRecord, CrossCheck, ImageProbe
from harness.safety.readers import load_json
from harness.serve.base import Server

# a part of the cell's partial record (harness.results.partial.PartialCell), by its field name
Part = ImageProbe | BenchRecord | CrossCheck | None
Partial = Callable[[str, Part], None]
log = logging.getLogger("harness.stages.measure")


@dataclass
class Measurement:
    image_fingerprint: ImageProbe | None = None
    bench: BenchRecord | None = None
    cross_check: CrossCheck | None = None
    durations: dict[str, float] = field(default_factory=dict)


def probe_source() -> bytes:
    return resources.files("harness").joinpath("probe_image.py").read_bytes()


def image_fingerprint(server: Server) -> ImageProbe | None:
    """Versions and env from inside the image (or the local env), via probe_image.py: its last
    line, read once into an ImageProbe; None when the probe failed or printed something else."""
    code, text = server.run_python(probe_source(), timeout_s=120)
    if code != 0 or not text.strip():
        return None
    try:
        return ImageProbe.model_validate_json(text.strip().splitlines()[-1])
    except ValueError as exc:  # not JSON, or not the probe's record (ValidationError)
        log.warning("the image probe printed no record this tool can read: %s", str(exc).splitlines()[0][:200])
        return None


def cross_check(command: str, url: str, model: str, out_json: Path) -> CrossCheck:
    """Another client against the same server (HARNESS_URL, HARNESS_MODEL, HARNESS_OUT)."""

    t0 = time.monotonic()
    r = proc.run(["bash", "-c", command], timeout=1800,
                 env={**os.environ, "HARNESS_URL": url, "HARNESS_MODEL": model,
                      "HARNESS_OUT": str(out_json)})
    data = None
    if out_json.is_file():
        try:  # what the command wrote is data: bounded, a regular file, not nested past reason
            data = load_json(out_json, limit=16 << 20, what="--cross-check result")
        except ConfigError:
            data = None
    return CrossCheck(command=command, exit_code=r.returncode,
                      duration_s=round(time.monotonic() - t0, 1),
                      output_tail=tuple((r.stdout + r.stderr).strip().splitlines()[-20:]),
                      result=data)


# the memory watch's steady load: one round of concurrency-8 decode after another
SOAK = BenchSettings(concurrency=(8,), max_tokens=128, repeats=1, warmup=False, prefill=False)


def settings_of(cfg: Bench) -> BenchSettings:
    """The matrix's [bench] table as the benchmark's settings."""
    return BenchSettings(concurrency=cfg.concurrency, max_tokens=cfg.max_tokens, repeats=cfg.repeats,
                         prompt_tokens=cfg.prompt_tokens, prefill=cfg.prefill,
                         long_prompt_tokens=cfg.long_prompt_tokens)


def soak(url: str, model: str, seconds: float) -> None:
    """Steady load for the memory watch: rounds of concurrency-8 decode until time is up."""

    end = time.monotonic() + seconds
    while time.monotonic() < end:
        run_bench_sync(url, model, SOAK)


def measure(server: Server, model: str, cfg: Bench, *, bench: bool = True,
            cross_check_cmd: str | None = None, cross_check_out: Path | None = None,
            soak_s: float = 0.0, on_partial: Partial = lambda _k, _v: None,
            on_phase: Callable[[str], None] = lambda _p: None) -> Measurement:
    m = Measurement()
    on_phase("probe")
    m.image_fingerprint = image_fingerprint(server)
    on_partial("image_fingerprint", m.image_fingerprint)
    if bench:

        on_phase("bench")
        t0 = time.monotonic()
        levels = list(cfg.concurrency)

        def progress(c: int, done: int, total: int) -> None:
            i = levels.index(c) + 1 if c in levels else 0
            on_phase(f"bench level {i}/{len(levels)} (c={c}): {done}/{total} requests")

        result = run_bench_sync(server.base_url, model, settings_of(cfg), progress=progress)
        m.bench = result
        m.durations["bench_s"] = round(time.monotonic() - t0, 1)
        on_partial("bench", m.bench)
    if cross_check_cmd and cross_check_out is not None:
        on_phase("cross-check")
        m.cross_check = cross_check(cross_check_cmd, server.base_url, model, cross_check_out)
        on_partial("cross_check", m.cross_check)
    if soak_s > 0:
        on_phase(f"soak {soak_s:.0f} s")
        soak(server.base_url, model, soak_s)
    return m
