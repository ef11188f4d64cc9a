#!/usr/bin/env bash
# How to make the worked example in this folder on an H200 test machine (local runner).
#
# The machine has Python 3.12 + torch 2.11.0+cu130 at /opt/torch/.venv and no package index, and
# each command carries at most 64 MiB, so vLLM 0.25.1 travels as the parts of a bundle this
# repository makes (harness bundle, bundles/vllm-0.25.1-h200.toml):
#   harness bundle make bundles/vllm-0.25.1-h200.toml --out .bundle/vllm-0.25.1-h200
# which writes part_00, part_01 (60 MB each), part_02 and bundle.json (sha256 of every part).
# Keep them git-ignored in the checkout (.bundle/); each command below carries what it names.
# Usage, one command each, back to back (the machine keeps /tmp only while warm):
#   bash examples/h200/device.sh stage            # carries part_00
#   bash examples/h200/device.sh run [K] [BUDGET]  # carries part_01, part_02, bundle.json: installs, runs
#   bash examples/h200/device.sh more K [BUDGET] [SOAK_S]  # widens the same run with more cells
# The harness itself needs docker, tenacity and pydantic there: carry their wheels in .whl/ (see
# examples/h200-docker/device.sh for the Docker path of the same machine).
# The run committed in run/ (2026-11-30) was made with an earlier form of this script that used
# files kept outside this repository; run/run.json records that command line as it was.
set -u
PY=/opt/torch/.venv/bin/python3
BUNDLE=.bundle/vllm-0.25.1-h200
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT" /tmp/stage
# an independent client measured on the same server (tool overhead): tools/stream_bench.py
CROSS="$PY tools/stream_bench.py \$HARNESS_URL \$HARNESS_MODEL \$HARNESS_OUT"

export PYTHONUNBUFFERED=1
harness() {
  PYTHONPATH="$PWD:/tmp/hsite" "$PY" -m harness "$@"
}
# `timeout -s INT` stops the run as Ctrl-C would: the server is stopped, finished cells stay.
timed_harness() {
  local budget=$1; shift
  timeout -s INT "$budget" env PYTHONPATH="$PWD:/tmp/hsite" "$PY" -m harness "$@"
}

case "${1:-}" in
stage)
  cp "$BUNDLE/part_00" /tmp/stage/
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv
  ls -la /tmp/stage
  ;;
run)
  cp "$BUNDLE/part_01" "$BUNDLE/part_02" "$BUNDLE/bundle.json" /tmp/stage/
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/hsite .whl/*.whl || exit 8
  harness bundle install /tmp/stage --dest /tmp/wheelhouse --site /tmp/site --python "$PY" || exit 9
  "$PY" harness/data/docker/wheels.py patch --python "$PY" --site /tmp/site \
      patches/wheel/vllm-0.25.1-flash-attn-optional.patch || exit 9
  cat /tmp/site/vllm/engine/*.py /tmp/site/vllm/config/*.py > /tmp/words.txt
  "$PY" tools/make_dummy_models.py /tmp/models /tmp/words.txt || exit 7
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
