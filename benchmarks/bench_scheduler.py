"""The scheduler of `harness run` over several hosts, timed: 12 stand-in cells of a fixed length
on 2 Docker engines x 2 slots.

Engines: the main one (unix:///var/run/docker.sock, bridge network) and a second dockerd this
script starts (tests/engines.py: own socket, data root, bridge; host network for its cells,
one port per slot). Cells: the stand-in vLLM image of tests/test_pipeline_docker.py, no GPU,
each server ready after FAKE_VLLM_STARTUP_S seconds, no benchmark (`bench = False`): a cell is
container start, readiness, fingerprint, judge, stop.

Figures:
- wall: `run_matrix` from the first cell to the last (the run's schedule.json, written by the
  slot threads), and from call to return (connect, reap, image checks included);
- ideal: the sum of the time each slot held each cell (schedule.json), divided by the 4 slots;
- gap: wall / ideal - 1 (target: within 10 %);
- controller CPU: `time.process_time()` of this process over the run (all its threads; the
  containers' CPU is not ours).

Needs root (dockerd), the base image harness-test/debian-python:bookworm (tools/base-images.sh).
Writes benchmarks/results/scheduler.json and prints a table.

    python3 benchmarks/bench_scheduler.py [--cell-s 8] [--cells 12]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from engines import MAIN, copy_image, fake_vllm_context, free_port, second_dockerd  # noqa: E402

from harness.engine import connect  # noqa: E402
from harness.matrix.load import load_matrix  # noqa: E402
from harness.run.options import RunOptions  # noqa: E402
from harness.run.session import run_matrix  # noqa: E402


def matrix_text(image: str, url_two: str, cell_s: float, cells: int, port: int) -> str:
    configs = "\n".join(f'[configs.c{i:02d}]\nenv = {{ FAKE_VLLM_STARTUP_S = "{cell_s}" }}\n' for i in range(cells))
    return f"""
[matrix]
name = "bench-scheduler"
hardware = "gpu"

[hardware.gpu]
cc = "12.1"
bandwidth_gbs = 273
memory_gib = 128

[stacks.img]
image = "{image}"

[models.qwen-fp8]
checkpoint = "fake/qwen3moe-fp8"
quantization = "fp8"
load_format = "dummy"
active_params_b = 3.3
bytes_per_param = 1.0

{configs}

[serve]
gpus = "none"
startup_timeout_s = 300
quiet_period_s = 120

[hosts.main]
engine = "{MAIN}"
gpus = "none"
slots = 2

[hosts.two]
engine = "{url_two}"
gpus = "none"
slots = 2
network = "host"
ports = [{port}, {port + 1}]
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cell-s", type=float, default=8.0, help="start-up delay of each stand-in server")
    ap.add_argument("--cells", type=int, default=12)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "scheduler.json")
    args = ap.parse_args()

    engine = connect()
    tag = f"harness-test/fakevllm-bench:{os.getpid()}"
    engine.build(fake_vllm_context(), tag, labels={"harness.role": "test-image"})
    try:
        with second_dockerd() as two, tempfile.TemporaryDirectory(prefix="bench-sched-") as tmp:
            copy_image(tag, MAIN, two.url)
            port = free_port()
            path = Path(tmp) / "m.toml"
            path.write_text(matrix_text(tag, two.url, args.cell_s, args.cells, port))
            cpu0, t0 = time.process_time(), time.monotonic()
            store = run_matrix(load_matrix(path), k=None,
                               opts=RunOptions(results_root=Path(tmp) / "results", bench=False))
            call_wall = time.monotonic() - t0
            cpu = time.process_time() - cpu0
            schedule = store.schedule()
            cells = store.cells()
    finally:
        engine.remove_image(tag)

    slots = 4
    held = [e.end - e.start for e in schedule]
    wall = max(e.end for e in schedule) - min(e.start for e in schedule)
    ideal = sum(held) / slots
    per_slot = {}
    for e in schedule:
        per_slot.setdefault(f"{e.host}#{e.slot}", []).append(e.cell.rsplit("/", 1)[-1])
    result = {
        "machine": f"{os.uname().sysname} {os.uname().machine}, {os.cpu_count()} CPUs, load average "
                   f"{os.getloadavg()[0]:.1f} at the end",
        "cells": len(schedule), "slots": slots, "cell_startup_s": args.cell_s,
        "statuses": sorted({str(c.status) for c in cells}),
        "hosts": sorted({c.host for c in cells}),
        "held_s": {"min": round(min(held), 2), "max": round(max(held), 2), "sum": round(sum(held), 2)},
        "wall_s": round(wall, 2), "call_wall_s": round(call_wall, 2), "ideal_s": round(ideal, 2),
        "gap_pct": round(100 * (wall / ideal - 1), 2),
        "controller_cpu_s": round(cpu, 2), "controller_cpu_pct_of_wall": round(100 * cpu / call_wall, 1),
        "per_slot": per_slot,
        "target": "wall within 10 % of ideal",
        "met": wall <= 1.10 * ideal,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(f"{result['cells']} cells on {slots} slots ({', '.join(result['hosts'])}), statuses {result['statuses']}")
    print(f"each slot held a cell {result['held_s']['min']}-{result['held_s']['max']} s, sum {result['held_s']['sum']} s")
    print(f"wall {result['wall_s']} s (first start -> last end; {result['call_wall_s']} s call to return), "
          f"ideal {result['ideal_s']} s (sum / {slots}): {result['gap_pct']:+.2f} %  "
          f"[target within 10 %: {'MET' if result['met'] else 'NOT MET'}]")
    print(f"controller CPU {result['controller_cpu_s']} s ({result['controller_cpu_pct_of_wall']} % of one core "
          "over the call)")
    for slot, names in sorted(per_slot.items()):
        print(f"  {slot}: {' '.join(names)}")
    print(f"written: {args.out.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
