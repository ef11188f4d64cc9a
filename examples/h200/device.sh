#!/usr/bin/env bash
# How the worked example in this folder was made on the lent H200 test machine.
#
# The machine has Python 3.12 + torch 2.11.0+cu130 at /opt/torch/.venv and no package index;
# vLLM 0.25.1 travels as a split bundle made by shared/gpu/make_bundle.sh (kept, git-ignored, in
# .gpukit/: p0/part_00, p1/part_01, kit/), at most 64 MiB per command, so it takes two commands.
# Usage, one command each, back to back (the machine keeps /tmp only while warm):
#   bash examples/h200/device.sh stage            # sends part_00
#   bash examples/h200/device.sh run [K] [BUDGET]  # sends part_01, installs, runs the matrix
#   bash examples/h200/device.sh more K [BUDGET] [SOAK_S]  # widens the same run with more cells
set -u
PY=/opt/torch/.venv/bin/python3
KIT=.gpukit/kit
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
# bench.py from the kit: an independent client measured on the same server (tool overhead)
CROSS="$PY $KIT/bench.py \$HARNESS_URL \$HARNESS_MODEL \$HARNESS_OUT"

export PYTHONUNBUFFERED=1
harness() {
  PYTHONPATH="$PWD:/tmp/site:/tmp/hsite" "$PY" -m harness "$@"
}
# `timeout -s INT` stops the run as Ctrl-C would: the server is stopped, finished cells stay.
timed_harness() {
  local budget=$1; shift
  timeout -s INT "$budget" env PYTHONPATH="$PWD:/tmp/site:/tmp/hsite" "$PY" -m harness "$@"
}

case "${1:-}" in
stage)
  mkdir -p /tmp/stage && cp .gpukit/p0/part_00 /tmp/stage/
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv
  ls -la /tmp/stage
  ;;
run)
  cp .gpukit/p1/part_01 /tmp/stage/
  bash "$KIT/install_on_device.sh" "$(cat "$KIT/site.sha256")" || exit 9
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/hsite .whl/*.whl || exit 8
  cat /tmp/site/vllm/engine/*.py /tmp/site/vllm/config/*.py > /tmp/words.txt
  "$PY" "$KIT/make_models.py" /tmp/models /tmp/words.txt || exit 7
  harness env --json > "$OUT/host.json"
  harness doctor -m matrix/h200-local.toml > "$OUT/doctor.txt" 2>&1
  timed_harness "${3:-540}" run -m matrix/h200-local.toml -k "${2:-auto}" --results /tmp/results \
      --cross-check "$CROSS"
  echo "harness run exit: $?"
  tar czf "$OUT/results.tgz" -C /tmp results
  ;;
more)
  run_dir=$(ls -d /tmp/results/*/ | head -1)
  [ -n "$run_dir" ] || { echo "no run to widen: the machine went cold"; exit 6; }
  timed_harness "${3:-540}" run --resume "$run_dir" -k "$2" --cross-check "$CROSS" --soak "${4:-0}"
  echo "harness run exit: $?"
  tar czf "$OUT/results.tgz" -C /tmp results
  ;;
*)
  echo "usage: device.sh stage | run [K] [BUDGET] | more K [BUDGET]"; exit 2 ;;
esac
