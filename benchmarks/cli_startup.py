"""How long the `harness` command takes to answer before doing any work.

    python benchmarks/cli_startup.py [--repeats 21]

Runs `harness --version` and `harness fingerprint --help` in fresh interpreters and prints the
median and spread of wall time and of the child's own CPU time (user+sys, from wait4): on a busy
machine wall time measures the neighbours, CPU time measures us. Target (issue: one shape for a
run): `--version` under 0.3 s.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time

CASES = {
    "harness --version": ["--version"],
    "harness fingerprint --help": ["fingerprint", "--help"],
    "harness run --help": ["run", "--help"],
}


def one(args: list[str]) -> tuple[float, float]:
    t0 = time.perf_counter()
    p = subprocess.Popen([sys.executable, "-m", "harness", *args], stdout=subprocess.DEVNULL,
                         stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(p.pid, 0)
    wall = time.perf_counter() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"harness {' '.join(args)} failed")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=21)
    a = ap.parse_args()
    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cpus, load {os.getloadavg()[0]:.1f}")
    print(f"{'command':32} {'wall p50':>9} {'wall min':>9} {'cpu p50':>8}")
    for name, args in CASES.items():
        one(args)  # warm the page cache and .pyc files
        runs = [one(args) for _ in range(a.repeats)]
        walls, cpus = [w for w, _ in runs], [c for _, c in runs]
        print(f"{name:32} {statistics.median(walls):8.3f}s {min(walls):8.3f}s "
              f"{statistics.median(cpus):7.3f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
