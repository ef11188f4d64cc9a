#!/usr/bin/env bash
# How examples/h200-docker was made on an air-gapped H200 VM (no Docker, no package index,
# at most 64 MiB sent with each command, released 30 s after a command ends: run these back to back).
# Everything it uses is in this repository; the carried folder DEV (default ../..: the folder
# that holds this checkout's copy) has kit/ (tools/make-docker-kit.sh), p0/ p1/ p2/ (the parts of
# `harness bundle make bundles/vllm-0.25.1-h200.toml`, bundle.json with p2) and hwhl/ (wheels of
# the harness's own dependencies that machine lacks: docker, tenacity, pydantic).
#   device.sh up            # kit + part_02: dockerd, base image, harness deps, doctor
#   device.sh stage N       # part_0N to /tmp/stage
#   device.sh build DEADLINE  # part_01: bundle install, models, harness build, audit, first cell
#   device.sh more K DEADLINE # more cells of the same run (-k K)
# DEADLINE: seconds the whole command may take (the run is stopped with SIGINT before it).
#   device.sh interrupt SECONDS K   # Ctrl-C (SIGINT) in the middle of a cell, then docker ps -a
set -u
DEV=${DEV:-$(cd "$(dirname "$0")/../../.." && pwd)}
PY=/opt/torch/.venv/bin/python3
OUT=${OUT:-/tmp/out}
MATRIX=matrix/h200-docker.toml
SITE=/opt/torch/.venv/lib/python3.12/site-packages
mkdir -p "$OUT" /tmp/stage
export PYTHONUNBUFFERED=1 PATH=/tmp/dk/bin:$PATH DOCKER_HOST=unix:///tmp/docker.sock
harness() { PYTHONPATH="$PWD:/tmp/hsite" "$PY" -m harness "$@"; }
# `timeout -s INT` stops a run as Ctrl-C would: the container is removed, finished cells stay.
timed_harness() { local b=$1; shift; timeout -s INT "$b" env PYTHONPATH="$PWD:/tmp/hsite" "$PY" -m harness "$@"; }
stamp() { date +%s.%N; }
T_START=$(date +%s)
# what is left of a command's DEADLINE seconds, less 25 s to pack the results
left() { echo $(( $1 - ($(date +%s) - T_START) - 25 )); }
containers() { echo "--- docker ps -a ($1):"; docker ps -a; echo "--- end"; }

case "${1:-}" in
up)
  cp "$DEV"/p2/part_02 "$DEV"/p2/bundle.json /tmp/stage/
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/hsite "$DEV"/hwhl/*.whl || exit 8
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv
  t0=$(stamp); source tools/device-docker-up.sh "$DEV/kit/docker-kit.tar.xz" || exit 7; t1=$(stamp)
  bash tools/device-base-image.sh h200-root:local || exit 6; t2=$(stamp)
  echo "dockerd up: $(awk "BEGIN{print $t1-$t0}") s; base import: $(awk "BEGIN{print $t2-$t1}") s"
  harness doctor -m "$MATRIX" 2>&1 | tee "$OUT/doctor.txt"
  ;;
stage)
  cp "$DEV/p$2/part_0$2" /tmp/stage/ && ls -la /tmp/stage
  ;;
build)
  cp "$DEV"/p1/part_01 /tmp/stage/
  t0=$(stamp)
  harness bundle install /tmp/stage --dest /tmp/wheelhouse --site /tmp/site --python "$PY" || exit 9
  "$PY" docker/wheels.py patch --python "$PY" --site /tmp/site patches/wheel/vllm-0.25.1-flash-attn-optional.patch || exit 9
  t1=$(stamp); echo "bundle install (+ --site): $(awk "BEGIN{print $t1-$t0}") s"
  cat /tmp/site/vllm/engine/*.py /tmp/site/vllm/config/*.py > /tmp/words.txt
  "$PY" tools/make_dummy_models.py /tmp/models /tmp/words.txt || exit 7
  harness build -m "$MATRIX" -k docker --log-dir "$OUT" 2>&1 | tail -5; t2=$(stamp)
  echo "harness build: $(awk "BEGIN{print $t2-$t1}") s"
  img=$(docker images vllm-bw --format '{{.Repository}}:{{.Tag}}' | head -1)
  docker image inspect "$img" > "$OUT/image.json"
  harness audit "$img" --image-path "$SITE/vllm" 2>&1 | tee "$OUT/audit.txt" | tail -25
  timed_harness "$(left "$2")" run -m "$MATRIX" -k "docker and fp8" --results /tmp/results
  echo "harness run exit: $?"; containers "after the run"
  tar czf "$OUT/results.tgz" -C /tmp results
  ;;
more)
  run_dir=$(ls -d /tmp/results/*/ | head -1)
  [ -n "$run_dir" ] || { echo "no run to widen: the machine went cold"; exit 6; }
  timed_harness "$(left "$3")" run --resume "$run_dir" -k "$2"
  echo "harness run exit: $?"; containers "after the run"
  tar czf "$OUT/results.tgz" -C /tmp results
  ;;
interrupt)
  timed_harness "$2" run -m "$MATRIX" -k "$3" --results /tmp/results-int 2>&1 | tail -8
  echo "harness run exit (SIGINT after $2 s): ${PIPESTATUS[0]}"; containers "after Ctrl-C"
  tar czf "$OUT/interrupted.tgz" -C /tmp results-int
  ;;
*)
  echo "usage: device.sh up | stage N | build BUDGET | more K BUDGET | interrupt SECONDS K"; exit 2 ;;
esac
