"""`python -m flashinfer.aot` as the default stacks run it, compiled family by family and timed.

usage, from FlashInfer's source tree (where the image's AOT step runs it), FLASHINFER_CUDA_ARCH_LIST
and MAX_JOBS set as the stack sets them:

    python aot_timed.py --log DIR [--only NAME ...] [--families FAMILY ...] -- --out-dir OUT --build-dir BUILD

It runs FlashInfer's own entry point, `flashinfer.aot.main()`, with the arguments after `--`: the
same module list (gen_all_modules with the default configuration), the same build.ninja per module,
the same ninja at -j MAX_JOBS, the same copy to OUT (copy_built_kernels). One change:
`build_jit_specs` runs once per kernel family, in the order of tools/flashinfer_aot_plan.py (the
families an FP8/NVFP4 MoE model's serving path loads first; `--first` puts some before the rest),
instead of once for the whole list,
so that what finishes first is what serving needs and each family's wall time is its own. The
families partition the list: every module is compiled, none twice. `--only` / `--families` keep
a part of the list (a partial AOT build: OUT then holds that part).

DIR gets, as they happen (so a run cut short keeps what finished):
  events.tsv                 one line per step: step, family, modules, CUDA sources, start and end
                             (Unix seconds), exit (0, or the error), ninja-log lines before the step
  plan.json                  the module list: name, family, sources, CUDA sources
  ninja.log                  ninja's own log of every run (each object's start and end, ms from
                             that run's start; FlashInfer runs ninja in BUILD/cached_ops), copied
                             after each family
examples/flashinfer-aot/timings.py turns them into per-module and per-family times.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
from flashinfer_aot_plan import family_of, family_order  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ours, aot_args = (argv[: argv.index("--")], argv[argv.index("--") + 1:]) if "--" in argv else (argv, [])
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--log", type=Path, required=True, help="where the timing files go")
    p.add_argument("--only", nargs="+", metavar="NAME", help="only these modules")
    p.add_argument("--families", nargs="+", metavar="FAMILY", choices=family_order(), help="only these families")
    p.add_argument("--first", nargs="+", default=[], metavar="FAMILY", choices=family_order(),
                   help="compile these families first, in this order; then the others in the usual order")
    a = p.parse_args(ours)
    order = [*a.first, *(f for f in family_order() if f not in a.first)]
    a.log.mkdir(parents=True, exist_ok=True)
    events = a.log / "events.tsv"
    if not events.exists():
        events.write_text("step\tfamily\tmodules\tcuda_sources\tstart\tend\texit\tninja_lines_before\n")

    def event(step: str, family: str, specs: list, start: float, end: float, status: str, before: int) -> None:
        cuda = sum(1 for s in specs for src in s.sources if Path(src).suffix == ".cu")
        with events.open("a") as f:
            f.write(f"{step}\t{family}\t{len(specs)}\t{cuda}\t{start:.3f}\t{end:.3f}\t{status}\t{before}\n")

    # `python -m flashinfer.aot` imports FlashInfer from the current folder (its source tree) first
    sys.path.insert(0, os.getcwd())
    import torch.utils.cpp_extension as cpp_extension

    # A CPU build of torch (a test run on a machine without CUDA torch) leaves CUDA_HOME unset
    # whatever the environment says, and some module generators read torch's CUDA include paths;
    # a CUDA build (the stacks', the device's) finds the toolkit itself and this does nothing.
    if cpp_extension.CUDA_HOME is None and os.environ.get("CUDA_HOME"):
        cpp_extension.CUDA_HOME = os.environ["CUDA_HOME"]
    import flashinfer.aot as aot
    from flashinfer.jit import env as jit_env

    real_gen, real_build = aot.gen_all_modules, aot.build_jit_specs

    def gen_all_modules(*args, **kwargs):
        start = time.time()
        specs = real_gen(*args, **kwargs)
        if a.only:
            unknown = sorted(set(a.only) - {s.name for s in specs})
            if unknown:
                raise SystemExit(f"aot_timed: --only names modules the AOT step does not compile: {unknown}")
            specs = [s for s in specs if s.name in a.only]
        if a.families:
            specs = [s for s in specs if family_of(s.name) in a.families]
        (a.log / "plan.json").write_text(json.dumps([
            {"name": s.name, "family": family_of(s.name), "sources": len(s.sources),
             "cuda_sources": sum(1 for src in s.sources if Path(src).suffix == ".cu")} for s in specs], indent=0))
        event("generate", "-", specs, start, time.time(), "0", 0)
        return specs

    def build_jit_specs(specs, verbose=False, skip_prebuilt=True):
        ninja_log = Path(jit_env.FLASHINFER_JIT_DIR) / ".ninja_log"
        failed = []
        for family in order:
            group = [s for s in specs if family_of(s.name) == family]
            if not group:
                continue
            before = len(ninja_log.read_text().splitlines()) if ninja_log.exists() else 0
            start, status = time.time(), "0"
            print(f"aot_timed: {family}: {len(group)} modules", flush=True)
            try:
                real_build(group, verbose=verbose, skip_prebuilt=skip_prebuilt)
            except Exception as exc:  # a family that fails to compile is a result; the next ones still run
                status = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:200]
                failed.append(family)
            event("build", family, group, start, time.time(), status.replace("\t", " "), before)
            if ninja_log.exists():
                shutil.copyfile(ninja_log, a.log / "ninja.log")
        if failed:
            raise RuntimeError(f"aot_timed: these families failed to compile: {', '.join(failed)}")

    aot.gen_all_modules, aot.build_jit_specs = gen_all_modules, build_jit_specs
    sys.argv = ["flashinfer.aot", *aot_args]
    start = time.time()
    try:
        aot.main()
    except BaseException as exc:
        event("aot", "-", [], start, time.time(), f"{type(exc).__name__}: {exc}"[:200].replace("\t", " "), 0)
        raise
    event("aot", "-", [], start, time.time(), "0", 0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
