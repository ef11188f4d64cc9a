#!/usr/bin/env bash
# What the default release's vLLM build costs on a 16-core machine with nvcc 13.0 and GCC >= 13,
# run natively (no Docker) from the checkout root on a host with no network; every result goes
# into one tarball under $OUT. Inputs: examples/default-release/inputs/ (tools/default-release-inputs.sh,
# ~2.2 MB, git-ignored: carry it with the checkout).
#
#   bash examples/default-release/device.sh probe
#       the three default stacks' configures (spark-stock 12.1a, spark-121a 12.1a + patch 0001,
#       rtx-120a 12.0a; each with patches/vllm/vllm-0.33.0-probe-offline.patch, the CUTLASS v4.7.0
#       stand-in and the QuTLASS pin), at once, then the probe units of harness/data/probe/units.toml
#       (SM12x NVFP4 GEMM, NVFP4 MoE grouped GEMM, scaled_mm c3x sm120, moe_data) of each stack
#       compiled with all the cores (nproc / 3 jobs per stack, the three at once), each unit timed
#       (.ninja_log), its cubins and OMMA.SF count read with cuobjdump where there is one
#       -> $OUT/default-release-probe.tar.gz
#   bash examples/default-release/device.sh sample [STACK] [EVERY] [BUDGET_S]
#       STACK's configure (default spark-121a), then every EVERY-th object (default 6) of its whole
#       build graph compiled with nproc jobs for at most BUDGET_S seconds (default 360), and the
#       whole build estimated from those objects' own step times (record.json "sample.estimate",
#       named an estimate; a step the budget stopped counts with the time it had run, a floor)
#       -> $OUT/default-release-sample-STACK.tar.gz. 0.33.0 with the probe patch: 122 objects
#       (114 CUDA) for 12.1a, so the default samples 21 of them.
#
# env: PYTHON (default /opt/torch/.venv/bin/python3: the torch whose CMake files vLLM's configure
#      reads; a torch other than 2.14.0 makes vLLM warn, which the record keeps), OUT (default
#      ./out), JOBS (default nproc), UNITS (sources to compile instead of the units table's, for a
#      short test), WORK (default a fresh folder under /tmp), PROBE_BUDGET_S (probe: each stack's
#      unit compile stopped after that many seconds; finished units kept, the rest listed with the
#      time they had run).
# Each record (record.json, tools/configure_targets.py) holds the toolchain it ran with and the
# host's own facts (host.txt); nothing here is the registry base: the records say so.
set -euo pipefail
verb=${1:?usage: device.sh probe | sample [STACK] [EVERY] [BUDGET_S]}
cd "$(dirname "$0")/../.."
PY=${PYTHON:-/opt/torch/.venv/bin/python3}
OUT=${OUT:-$PWD/out}
JOBS=${JOBS:-$(nproc)}
IN=examples/default-release/inputs
mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
[ -x "$PY" ] || { echo "device: no Python at $PY (set PYTHON)" >&2; exit 2; }
[ -f "$IN/MANIFEST" ] || { echo "device: no $IN/MANIFEST: run tools/default-release-inputs.sh where PyPI is reachable, and carry $IN" >&2; exit 2; }
(cd "$IN" && sha256sum -c --quiet MANIFEST) || { echo "device: $IN does not match its MANIFEST" >&2; exit 2; }
# cmake and ninja beside the interpreter (a venv's), nvcc where a CUDA install puts it
export PATH="$(dirname "$PY"):$PATH:/usr/local/cuda/bin"
command -v nvcc >/dev/null || { echo "device: no nvcc on PATH or in /usr/local/cuda/bin" >&2; exit 2; }
export CUDACXX=${CUDACXX:-$(command -v nvcc)}
work=${WORK:-$(mktemp -d /tmp/default-release.XXXXXX)}
mkdir -p "$work/src/cutlass" "$work/src/qutlass" "$work/out"
tar -C "$work/src/cutlass" -xJf "$IN"/cutlass-*.tar.xz
tar -C "$work/src/qutlass" -xJf "$IN"/qutlass-*.tar.xz
cp "$IN/MANIFEST" "$work/out/inputs-MANIFEST"
cutlass_pin=$(sed -n 's/^# \(cutlass-[^:]*\): \(.*\)$/\1: \2/p' "$IN/MANIFEST")
qutlass_pin=$(sed -n 's/^# \(qutlass-[^:]*\): \(.*\)$/\1: \2/p' "$IN/MANIFEST")
srcs=$("$PY" -c 'import json, sys; w, c, q = sys.argv[1:]; print(json.dumps({
  "cutlass": {"env": "VLLM_CUTLASS_SRC_DIR", "dir": w + "/src/cutlass", "pin": c},
  "qutlass": {"env": "QUTLASS_SRC_DIR", "dir": w + "/src/qutlass", "pin": q}}))' "$work" "$cutlass_pin" "$qutlass_pin")
{
  echo "date: $(date -u +%FT%TZ)"; echo "uname: $(uname -srm)"; echo "nproc: $(nproc)"; echo "load: $(cat /proc/loadavg)"
  grep -E '^(MemTotal|MemAvailable):' /proc/meminfo | sed 's/^/memory: /'
  echo "nvcc: $(nvcc --version | tail -2 | tr '\n' ' ')"; echo "gcc: $(gcc --version | head -1)"
  echo "cmake: $(cmake --version | head -1)"; echo "ninja: $(ninja --version)"
  echo "python: $PY $("$PY" -c 'import sys; print(sys.version.split()[0])')"
  echo "torch: $("$PY" -c 'import torch; print(torch.__version__, torch.version.cuda)' 2>/dev/null)"
  echo "cuobjdump: $(command -v cuobjdump || echo none)"
} > "$work/out/host.txt"
torch_v=$("$PY" -c 'import torch; print(torch.__version__)' 2>/dev/null || echo none)
# what the records must say of where they ran (tools/configure_targets.py puts it in each record)
export HARNESS_TOOLCHAIN_IMAGE="native: $(uname -m), $(nproc) cores, no Docker (device.sh)"
export HARNESS_BASE_LABELS=$("$PY" -c 'import json, sys; print(json.dumps({
  "harness.base.native": "this host itself, not nvidia/cuda:13.0.1-devel-ubuntu24.04 nor a stand-in image",
  "harness.base.gcc": sys.argv[1], "harness.base.torch": sys.argv[2] + " (vLLM 0.33.0 expects 2.14.0)"}))' \
  "$(gcc -dumpfullversion)" "$torch_v")
units=()
if [ -n "${UNITS:-}" ]; then read -r -a units <<<"$UNITS"
else mapfile -t units < <("$PY" -c 'import tomllib; [print(u["source"]) for u in tomllib.load(open("harness/data/probe/units.toml", "rb"))["0.33.0"]]')
fi
CUT=$PWD/patches/vllm/vllm-0.33.0-probe-offline.patch
ARCH=$PWD/patches/vllm/0001-cmake-sm121a-on-cuda13.patch
stack_args() {  # the stack's arch list and patch series, as matrix/spark.toml and matrix/rtx-pro-6000.toml ship them
  case "$1" in
    spark-stock) echo "12.1a --patch $CUT" ;;
    spark-121a) echo "12.1a --patch $ARCH --patch $CUT" ;;
    rtx-120a) echo "12.0a --patch $CUT" ;;
    *) echo "device: unknown stack $1 (spark-stock, spark-121a, rtx-120a)" >&2; return 2 ;;
  esac
}
configure() {  # STACK EXTRA_ARGS...
  local stack=$1; shift
  local args; args=$(stack_args "$stack")
  read -r arch rest <<<"$args"
  # shellcheck disable=SC2086  # the patch flags are meant to split
  "$PY" tools/configure_targets.py --sdist "$PWD/$IN/vllm-0.33.0-trimmed.tar.xz" --arch-list "$arch" $rest \
    --sources "$srcs" --out "$work/out/$stack" --work "$work/build/$stack" "$@" \
    > "$work/out/$stack.stdout" 2>&1
}
t0=$(date +%s)
case "$verb" in
  probe)
    per=$(( JOBS / 3 > 0 ? JOBS / 3 : 1 ))
    unit_args=(); for u in "${units[@]}"; do unit_args+=(--build-source "$u"); done
    # PROBE_BUDGET_S: each stack's unit compile stopped at that wall time, the finished units kept
    # and the others recorded with the time they had run (a floor), for a visit shorter than the probe
    [ -n "${PROBE_BUDGET_S:-}" ] && unit_args+=(--budget "$PROBE_BUDGET_S")
    pids=()
    for stack in spark-stock spark-121a rtx-120a; do
      configure "$stack" "${unit_args[@]}" --jobs "$per" & pids+=($!)
    done
    rc=0; for p in "${pids[@]}"; do wait "$p" || rc=1; done
    name=default-release-probe
    ;;
  sample)
    stack=${2:-spark-121a}; every=${3:-6}; budget=${4:-360}
    rc=0; configure "$stack" --sample-every "$every" --budget "$budget" --jobs "$JOBS" || rc=1
    name=default-release-sample-$stack
    ;;
  *) echo "device: unknown verb $verb (probe, sample)" >&2; exit 2 ;;
esac
echo "seconds: $(( $(date +%s) - t0 ))" >> "$work/out/host.txt"
echo "load after: $(cat /proc/loadavg)" >> "$work/out/host.txt"
"$PY" - "$work/out" > "$work/out/summary.txt" <<'PYEOF'
import json, sys
from pathlib import Path
for rec_path in sorted(Path(sys.argv[1]).glob("*/record.json")):
    r = json.loads(rec_path.read_text())
    d = r.get("decisions", {})
    print(f"{rec_path.parent.name}: configure exit {r['returncode']} in {r['seconds']} s; "
          f"NVFP4 {d.get('SM12x NVFP4')}, scaled_mm_c3x_sm120 {d.get('scaled_mm_c3x_sm120')}, "
          f"moe_data {d.get('moe_data')}; {r.get('cuda_objects_total')} CUDA objects")
    b = r.get("build")
    if b:
        print(f"  units: {b['steps']} steps, wall {b['wall_s']} s at -j{b['jobs']}, {b['step_minutes']} step-min, "
              f"{b['cpu_minutes']} CPU-min, exit {b['returncode']}")
        for out, secs in b["step_seconds"].items():
            f = b.get("objects", {}).get(out, {})
            print(f"    {secs:8.1f} s  {out.rsplit('/', 1)[-1]}  cubins {f.get('cubins')}  OMMA.SF {f.get('omma_sf')}")
    s = r.get("sample")
    if s:
        e = s["estimate"]
        print(f"  sample: every {s['every']}: {s['steps']} of {s['picked']} picked objects in {s['wall_s']} s "
              f"(budget {s['budget_s']}, stopped {s['stopped_by_budget']}); ESTIMATE for all {e['objects']} objects: "
              f"{e['estimated_step_minutes']} step-min, >= {e['estimated_wall_minutes_at_least']} min at -j{e['jobs']}; "
              f"no timed object in {e['targets_without_a_timed_object']}")
PYEOF
cat "$work/out/summary.txt"
tar -C "$work" -czf "$OUT/$name.tar.gz" out
echo "device: $OUT/$name.tar.gz ($(du -h "$OUT/$name.tar.gz" | cut -f1)), exit $rc"
exit $rc
