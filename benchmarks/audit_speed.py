"""`harness audit WHEEL` against `cuobjdump --list-elf` + `--list-ptx`, side by side, same run.

    python benchmarks/audit_speed.py /work/.cache-wheels/vllm-0.33.0-*.whl \
        /work/.cache-wheels/sgl_kernel-0.3.21-*.whl [--repeats 5] [--out benchmarks/results]

For each wheel, the `.so` files are unzipped once into a temp dir (not timed: cuobjdump cannot
read a wheel). Then, alternating, `repeats` times each:
- ours: `python -m harness audit WHEEL --json` (the CLI command; it reads the wheel itself:
  the zip read and inflate are timed, Python start-up included), and the same with
  `--cc 12.0 --cc 10.0` (verdicts, which also disassemble the NVFP4 cubins those chips load,
  with nvdisasm); and `python -m harness audit DIR --json` on the unzipped files cuobjdump
  reads (the same input for both);
- cuobjdump: `cuobjdump --list-elf F` then `cuobjdump --list-ptx F` for every unzipped
  `.so` F, one after the other, as a shell loop would.
Wall time and CPU time (user + system, the process and every child it waited for) are the
medians of the repeats. Peak memory, sampled every 20 ms from /proc over the process and its
descendants (pool workers, nvdisasm) in two more runs of each command, apart from the timed
ones (sampling takes CPU): the sum of Pss (a page a forked worker still shares
with its parent counts once) and the sum of VmRSS (counts it in each), and the largest
single process (ru_maxrss); for cuobjdump, ru_maxrss of its largest invocation. The load
average is printed before and after: the machine is shared, and our figure uses both cores
where cuobjdump uses one, so the wall-time ratio depends on what else runs; the CPU ratio
much less. Raw figures: results/audit_speed.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from harness.audit import tools  # noqa: E402


def _tree_pids(root: int) -> list[int]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                ppid = int(fh.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [root]
    while todo:
        pid = todo.pop()
        out.append(pid)
        todo += children.get(pid, [])
    return out


def _field_kb(path: str, key: str) -> int:
    try:
        with open(path) as fh:
            for line in fh:
                if line.startswith(key):
                    return int(line.split()[1])
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _tree_memory_kb(root: int) -> tuple[int, int]:
    """(sum of VmRSS, sum of Pss) over `root` and its descendants. RSS counts a page shared
    by a forked pool worker and its parent once in each; Pss splits it between them, so the
    Pss sum is the memory the tree really holds."""
    pids = _tree_pids(root)
    rss = sum(_field_kb(f"/proc/{pid}/status", "VmRSS:") for pid in pids)
    pss = sum(_field_kb(f"/proc/{pid}/smaps_rollup", "Pss:") for pid in pids)
    return rss, pss


def timed(cmd: list[str], env: dict | None = None, sample: bool = False) -> tuple[float, int, int, int, int, float]:
    """(wall s, peak tree RSS KB, ru_maxrss KB, exit code, peak tree Pss KB, CPU s) of one
    command. Memory is sampled only when asked: reading /proc every 20 ms takes CPU from a
    2-core machine, so timed runs go unsampled and memory gets runs of its own."""
    start = time.monotonic()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    peak = [0, 0]
    done = threading.Event()

    def sampler() -> None:
        while not done.is_set():
            rss, pss = _tree_memory_kb(proc.pid)
            peak[0], peak[1] = max(peak[0], rss), max(peak[1], pss)
            done.wait(0.02)

    t = threading.Thread(target=sampler, daemon=True)
    if sample:
        t.start()
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.monotonic() - start
    done.set()
    if sample:
        t.join()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return wall, peak[0], usage.ru_maxrss, proc.returncode, peak[1], usage.ru_utime + usage.ru_stime


def cuobjdump_all(cuobjdump: str, files: list[Path]) -> tuple[float, int, int, float]:
    """(wall s, max ru_maxrss KB, files with device code, CPU s) over every file, -lelf then -lptx."""
    start = time.monotonic()
    peak = 0
    with_code = 0
    cpu = 0.0
    for f in files:
        for flag in ("--list-elf", "--list-ptx"):
            proc = subprocess.Popen([cuobjdump, flag, str(f)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            out = proc.stdout.read()
            _, _status, usage = os.wait4(proc.pid, 0)
            peak = max(peak, usage.ru_maxrss)
            cpu += usage.ru_utime + usage.ru_stime
            if flag == "--list-elf" and out.strip():
                with_code += 1
    return time.monotonic() - start, peak, with_code, cpu


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("wheels", nargs="+", type=Path)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results")
    ap.add_argument(
        "--busy",
        type=int,
        default=0,
        help="run N busy loops (one core each) for the whole measurement: a shared machine, "
        "made reproducible; results go to audit_speed.busyN.md/.json",
    )
    args = ap.parse_args()
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(args.busy)]
    try:
        return measure(args)
    finally:
        for b in busy:
            b.kill()
            b.wait()


def measure(args: argparse.Namespace) -> int:
    cuobjdump = str(tools.require("cuobjdump"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    version = subprocess.run([cuobjdump, "--version"], capture_output=True, text=True).stdout.strip().splitlines()[-2]
    load_before = os.getloadavg()
    rows: list[str] = []
    raw: list[dict] = []
    for wheel in args.wheels:
        with tempfile.TemporaryDirectory(prefix="audit-speed-") as tmp:
            with zipfile.ZipFile(wheel) as zf:
                names = [n for n in zf.namelist() if ".so" in Path(n).name and not n.endswith("/")]
                for i, name in enumerate(names):  # flat, numbered names: nothing from the zip reaches a path
                    with zf.open(name) as src, open(Path(tmp) / f"{i:04d}.so", "wb") as dst:
                        while chunk := src.read(1 << 20):
                            dst.write(chunk)
            files = sorted(Path(tmp).iterdir())
            commands = {
                "ours": [sys.executable, "-m", "harness", "audit", str(wheel), "--json"],
                "ours_cc": [sys.executable, "-m", "harness", "audit", str(wheel), "--json", "--cc", "12.0", "--cc", "10.0"],
                "ours_dir": [sys.executable, "-m", "harness", "audit", tmp, "--json"],
            }
            r: dict[str, list] = {"ours": [], "cuobjdump": [], "ours_cc": [], "ours_dir": []}
            for i in range(args.repeats):
                order = list(r) if i % 2 == 0 else list(reversed(r))
                for which in order:
                    if which == "cuobjdump":
                        r[which].append(cuobjdump_all(cuobjdump, files))
                    else:
                        r[which].append(timed(commands[which], env))
                print(wheel.name, i, {k: [round(x[0], 2) for x in v] for k, v in r.items()}, os.getloadavg()[0], flush=True)
            mem = {k: [timed(commands[k], env, sample=True) for _ in range(2)] for k in commands}
            base = statistics.median(x[0] for x in r["cuobjdump"])
            base_cpu = statistics.median(x[3] for x in r["cuobjdump"])
            for label, key in (
                ("`harness audit WHEEL`", "ours"),
                ("`harness audit WHEEL --cc 12.0 --cc 10.0` (verdicts, SASS checked)", "ours_cc"),
                ("`harness audit DIR`, DIR = the unzipped `.so` files cuobjdump reads", "ours_dir"),
            ):
                wall = statistics.median(x[0] for x in r[key])
                cpu = statistics.median(x[5] for x in r[key])
                rows.append(
                    f"| {wheel.name} | {label} | {wall:.2f} ({', '.join(f'{x[0]:.2f}' for x in r[key])}) | "
                    f"**{wall / base:.2f}x** | {cpu:.2f} ({cpu / base_cpu:.2f}x) | {max(x[4] for x in mem[key]) / 1024:.0f} | "
                    f"{max(x[1] for x in mem[key]) / 1024:.0f} | {max(x[2] for x in r[key] + mem[key]) / 1024:.0f} | "
                    f"exit {sorted({x[3] for x in r[key] + mem[key]})} |"
                )
                raw.append({"wheel": wheel.name, "what": key, "runs": [list(x) for x in r[key]], "memory_runs": [list(x) for x in mem[key]]})
            rows.append(
                f"| {wheel.name} | cuobjdump --list-elf + --list-ptx, {len(files)} unzipped .so "
                f"({r['cuobjdump'][0][2]} with device code) | {base:.2f} ({', '.join(f'{x[0]:.2f}' for x in r['cuobjdump'])}) | "
                f"1.00x | {base_cpu:.2f} | - | - | {max(x[1] for x in r['cuobjdump']) / 1024:.0f} | - |"
            )
            raw.append({"wheel": wheel.name, "what": "cuobjdump", "runs": [list(x) for x in r["cuobjdump"]]})
    load_after = os.getloadavg()
    text = "\n".join(
        [
            "# harness audit vs cuobjdump, same run",
            "",
            f"Machine: {platform.node()}, {os.cpu_count()} CPUs (shared with other jobs), Python "
            f"{platform.python_version()}, cuobjdump {version}. {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
            f"Load average (1/5/15 min) before: {load_before[0]:.1f}/{load_before[1]:.1f}/{load_before[2]:.1f}, "
            f"after: {load_after[0]:.1f}/{load_after[1]:.1f}/{load_after[2]:.1f}.",
            f"Command: `python benchmarks/audit_speed.py {' '.join(str(w) for w in args.wheels)} --repeats {args.repeats}"
            f"{f' --busy {args.busy}' if args.busy else ''}`"
            + (f" ({args.busy} busy loop(s) held {args.busy} core(s) throughout)" if args.busy else ""),
            "",
            "| wheel | what | wall s, median (each run) | vs cuobjdump | CPU s, median (vs cuobjdump) | "
            "peak MiB, process tree (Pss) | peak MiB, process tree (RSS sum) | peak RSS MiB, largest process | |",
            "|---|---|---|---|---|---|---|---|---|",
            *rows,
            "",
        ]
    )
    args.out.mkdir(parents=True, exist_ok=True)
    stem = f"audit_speed.busy{args.busy}" if args.busy else "audit_speed"
    (args.out / f"{stem}.md").write_text(text)
    (args.out / f"{stem}.json").write_text(
        json.dumps(
            {
                "fields_ours": ["wall_s", "tree_rss_kb", "maxrss_kb", "exit", "tree_pss_kb", "cpu_s"],
                "fields_cuobjdump": ["wall_s", "maxrss_kb", "files_with_code", "cpu_s"],
                "load_before": load_before,
                "load_after": load_after,
                "results": raw,
            },
            indent=1,
        )
    )
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
