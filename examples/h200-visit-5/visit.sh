#!/usr/bin/env bash
# One visit of an air-gapped H200 VM (16 cores, nvcc 13.0, GCC 13.3, torch 2.11.0+cu130 in
# /opt/torch/.venv; no Docker, no package index; at most 64 MiB per command with the checkout,
# 10 minutes a command, released 30 s after a command ends: run these back to back) that serves
# three things at once:
#   - vLLM 0.33.0's units probe of the three default stacks on 16 cores, alone on the machine
#     (examples/default-release/device.sh probe): what the probe costs a user;
#   - FlashInfer 0.7.2.post1's AOT step for 12.1a and 12.0a, timed per family and module, then
#     audited (examples/flashinfer-aot/device.sh), run at nice 10 beside the rest;
#   - examples/h200-docker re-run at main: the wheel image built by the harness, audited, and its
#     FP8 and NVFP4 `auto` cells served through Docker (devices mode, host network), beside the
#     AOT compile (its figures are then a lower bound, as in the earlier re-runs during a compile).
# Inputs: `.fi-aot-inputs` (tools/flashinfer-aot-inputs.sh) and examples/default-release/inputs
# (tools/default-release-inputs.sh) are carried with the first command; the Docker kit and the
# wheel bundle go in pieces with the later ones (tools/visit-pack.py, joined by
# examples/h200-cache/gather.sh once each piece's sha256 checks):
#   visit.sh probe-aot          # machine facts; the probe (foreground); the AOT runs started
#   visit.sh stage DIR          # a folder of pieces into /tmp/inputs
#   visit.sh up DIR             # ...then dockerd, the harness's own dependencies, the base import (setsid)
#   visit.sh serve DIR S        # ...then the bundle installed, the image built and audited, the two
#                               #    cells started (setsid), waited on until S seconds have passed
#   visit.sh wait S             # the cells waited on (at most S s); the AOT's progress printed
#   visit.sh collect            # the AOT stopped, timed and audited; the run folder packed
# Each command's console and files come back under $OUT (one tarball per command, <= 16 MiB).
set -u
V=/tmp/vout
OUTDIR=${OUT:-/tmp/out}
mkdir -p "$V" "$OUTDIR"
PY=/opt/torch/.venv/bin/python3
MATRIX=matrix/h200-docker.toml
K="docker and auto"  # docker-0251/qwen3moe-fp8/auto and docker-0251/qwen3moe-nvfp4/auto
export PYTHONUNBUFFERED=1 PATH=/tmp/dk/bin:$PATH DOCKER_HOST=unix:///tmp/docker.sock INPUTS=/tmp/inputs
harness() { PYTHONPATH="$PWD:/tmp/hsite" "$PY" -m harness "$@"; }
T0=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - T0) )); }
step() {  # step NAME CMD...: CMD's console kept as NAME.log (and shown)
  local name=$1; shift
  echo "=== $name ($(date -u +%T), +$(( $(date +%s) - T0 )) s)"
  "$@" 2>&1 | tee "$V/$name.log"
  return "${PIPESTATUS[0]}"
}
pack() { tar -C "$V" -czf "$OUTDIR/vout-$1.tgz" . 2>/dev/null; echo "packed vout-$1.tgz ($(du -h "$OUTDIR/vout-$1.tgz" | cut -f1))"; }
aot_progress() {
  local a n
  for a in 12.1a 12.0a; do
    n=$(wc -l < "/tmp/fi-aot/a-$a/build/cached_ops/.ninja_log" 2>/dev/null || echo 0)
    echo "aot $a: $n ninja steps done; $(tail -1 "/tmp/fi-aot/a-$a/log/events.tsv" 2>/dev/null | cut -c1-160)"
  done
}
run_alive() { [ -f /tmp/run.pid ] && kill -0 "$(cat /tmp/run.pid)" 2>/dev/null; }

case "${1:-}" in
probe-aot)
  step 1-machine bash -c 'nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv;
    nproc; free -g | head -2; df -h /tmp | tail -1; cat /proc/loadavg; gcc --version | head -1; nvcc --version | tail -1'
  mkdir -p /tmp/hwhl && cp .fi-aot-inputs/audit/w/*.whl /tmp/hwhl/
  # the probe alone on the machine: its timings are what a 16-core host pays
  step 1-probe env OUT="$OUTDIR" PROBE_BUDGET_S=${PROBE_BUDGET_S:-390} timeout 540 bash examples/default-release/device.sh probe
  step 1-aot-start env OUT="$V/aot" nice -n 10 bash examples/flashinfer-aot/device.sh start
  pack 1 ;;
stage)
  step "stage-$(basename "$2")" bash examples/h200-cache/gather.sh "${2:?DIR}"; aot_progress ;;
up)
  step 3-gather bash examples/h200-cache/gather.sh "${2:?DIR}"
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/hsite /tmp/hwhl/*.whl || exit 8
  t=$(date +%s); source tools/device-docker-up.sh /tmp/inputs/kit/docker-kit.tar.xz > "$V/3-up.log" 2>&1 || { cat "$V/3-up.log"; exit 7; }
  cat "$V/3-up.log"; echo "dockerd up: $(( $(date +%s) - t )) s"
  setsid bash -c "s=\$(date +%s); bash tools/device-base-image.sh h200-root:local > /tmp/base.log 2>&1; \
    echo \"base import: \$(( \$(date +%s) - s )) s, exit \$?\" >> /tmp/base.log; touch /tmp/base.done" \
    < /dev/null > /dev/null 2>&1 &
  echo "base import started"; aot_progress; pack 3 ;;
serve)
  step 6-gather bash examples/h200-cache/gather.sh "${2:?DIR}"
  S=${3:?S}
  while [ ! -f /tmp/base.done ]; do sleep 2; done; cat /tmp/base.log | tee "$V/6-base.log"
  mkdir -p /tmp/wparts && cp /tmp/inputs/bundle/part_0? /tmp/inputs/bundle/bundle.json /tmp/wparts/
  step 6-bundle harness bundle install /tmp/wparts --dest /tmp/wheelhouse --site /tmp/site --python "$PY" || exit 9
  "$PY" docker/wheels.py patch --python "$PY" --site /tmp/site patches/wheel/vllm-0.25.1-flash-attn-optional.patch || exit 9
  cat /tmp/site/vllm/engine/*.py /tmp/site/vllm/config/*.py > /tmp/words.txt
  "$PY" tools/make_dummy_models.py /tmp/models /tmp/words.txt > "$V/6-models.log" 2>&1 || { cat "$V/6-models.log"; exit 7; }
  step 6-doctor harness doctor -m "$MATRIX"
  t=$(date +%s); step 6-build harness build -m "$MATRIX" -k docker --log-dir "$V"; echo "harness build: $(( $(date +%s) - t )) s"
  img=$(docker images vllm-bw --format '{{.Repository}}:{{.Tag}}' | grep docker-0251- | head -1)
  docker image inspect "$img" > "$V/6-image.json"
  step 6-audit harness audit "$img" -m "$MATRIX"
  # the cells: setsid, so they go on between commands; SIGINT at the deadline, as Ctrl-C would
  setsid bash -c "timeout -s INT 1200 env PYTHONPATH=$PWD:/tmp/hsite $PY -m harness run -m $MATRIX -k '$K' \
    --results /tmp/results > /tmp/run.log 2>&1; echo \"harness run exit \$?\" >> /tmp/run.log" \
    < /dev/null > /dev/null 2>&1 &
  echo $! > /tmp/run.pid
  echo "harness run started (-k '$K')"
  while run_alive && [ "$(left "$S")" -gt 30 ]; do sleep 20; done
  tail -5 /tmp/run.log; aot_progress
  cp /tmp/run.log "$V/run.log"; [ -d /tmp/results ] && tar -C /tmp -czf "$OUTDIR/results.tgz" results
  pack 6 ;;
wait)
  S=${2:?S}; n=0
  while run_alive && [ "$(left "$S")" -gt 30 ]; do
    sleep 20; n=$((n + 1)); [ $((n % 3)) = 0 ] && { tail -2 /tmp/run.log; aot_progress; }
  done
  run_alive && echo "the run goes on" || echo "the run has ended"
  tail -8 /tmp/run.log; aot_progress; docker ps -a
  cp /tmp/run.log "$V/run.log"; [ -d /tmp/results ] && tar -C /tmp -czf "$OUTDIR/results.tgz" results
  pack wait ;;
collect)
  if run_alive; then kill -INT -- "-$(cat /tmp/run.pid)" 2>/dev/null; sleep 20; fi
  cp /tmp/run.log "$V/run.log" 2>/dev/null; docker ps -a > "$V/docker-ps.txt" 2>&1
  [ -d /tmp/results ] && tar -C /tmp -czf "$OUTDIR/results.tgz" results
  step 9-collect env OUT="$OUTDIR" AUDIT_SERVING_S=${AUDIT_SERVING_S:-150} AUDIT_REST_S=${AUDIT_REST_S:-60} \
    bash examples/flashinfer-aot/device.sh collect
  pack 9 ;;
*)
  echo "usage: visit.sh probe-aot | stage DIR | up DIR | serve DIR S | wait S | collect"; exit 2 ;;
esac
