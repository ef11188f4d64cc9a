#!/usr/bin/env bash
# Times `make test` as a new user meets it: RUNS consecutive runs (default 2), each in a fresh
# clone of this checkout's HEAD with a fresh HOME, XDG cache and harness caches (pip's included),
# beside two busy loops (a loaded CI machine), phase by phase: the venv (`make install`), the
# Docker engine and base images (`make docker-up`), the test packages and images (`make
# test-deps`), then `make test` itself (its prerequisites then in place: its time is the suite's,
# with `--durations=50`, so each log says where the time went). Every run must be green.
#
#   usage: tools/time-make-test.sh OUT [RUNS]
#     --fresh-images (first argument): before each run, remove the images the set-up builds
#       (tools/base-images.sh, ray-image.sh, arm64-image.sh), so that their build is timed too,
#       as on a bare machine. Only on a machine of your own: other sessions' tests use them.
#
# Writes OUT/run-N/times.txt (one "phase seconds (exit) load" line each, the machine, the load
# before and after, pytest's last line) with each phase's log beside it, and OUT/summary.txt;
# exits 0 only when every phase of every run passed. TEST_WORKERS and HARNESS_* switches in the
# environment reach `make test` as given. Debian packages and a Docker engine already on the
# machine are kept: the first run on a bare machine pays for them (docs/measured.md).
set -uo pipefail
fresh_images=0
[ "${1:-}" = --fresh-images ] && { fresh_images=1; shift; }
out=${1:?usage: tools/time-make-test.sh [--fresh-images] OUT [RUNS]}
runs=${2:-2}
mkdir -p "$out"
out=$(cd "$out" && pwd)
repo=$(cd "$(dirname "$0")/.." && pwd)
IMAGES="harness-test/busybox:latest harness-test/debian-python:bookworm harness-test/ccache:bookworm
        harness-test/ray:2.60.0 harness-test/arm64:bookworm"

yes >/dev/null & busy1=$!
yes >/dev/null & busy2=$!
work=$(mktemp -d "${TMPDIR:-/tmp}/time-make-test.XXXXXX")
trap 'kill $busy1 $busy2 2>/dev/null; wait $busy1 $busy2 2>/dev/null; rm -rf "$work"' EXIT

machine="$(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo), $(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
commit=$(git -C "$repo" rev-parse --short HEAD)
rc=0
: > "$out/summary.txt"
for n in $(seq 1 "$runs"); do
  dir="$out/run-$n"
  mkdir -p "$dir"
  if [ "$fresh_images" = 1 ]; then
    # shellcheck disable=SC2086
    docker rmi $IMAGES >/dev/null 2>&1 || true
  fi
  clone="$work/clone-$n"
  home="$work/home-$n"
  git clone -q --no-local "$repo" "$clone" && mkdir -p "$home"
  {
    echo "machine: $machine; two busy loops beside"
    echo "commit: $commit (a fresh clone)  run $n of $runs  started: $(date -u '+%F %T') UTC"
    echo "fresh HOME, XDG cache, harness caches; images $([ "$fresh_images" = 1 ] && echo 'removed first' || echo 'kept')"
    echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  } > "$dir/times.txt"
  total=0
  for phase in install docker-up test-deps test; do
    start=$(date +%s.%N)
    (cd "$clone" && env -u HARNESS_CACHE_DIR -u HARNESS_COMPILE_CACHE_DIR -u HARNESS_TESTS_SHARED_CACHE \
        HOME="$home" XDG_CACHE_HOME="$home/.cache" PIP_NO_CACHE_DIR=1 \
        make "$phase" PYTEST_ARGS="--durations=50 ${PYTEST_ARGS:-}") > "$dir/$phase.log" 2>&1
    code=$?
    secs=$(awk -v a="$start" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }')  # awk: no bc on a bare machine
    total=$(awk -v a="$total" -v b="$secs" 'BEGIN { printf "%.1f", a + b }')
    printf '%-10s %7.1f s  (exit %d)  load %s\n' "$phase" "$secs" "$code" "$(cut -d' ' -f1-3 /proc/loadavg)" \
      | tee -a "$dir/times.txt"
    [ "$code" = 0 ] || rc=1
  done
  printf '%-10s %7.1f s  (%.1f min)\n' total "$total" "$(awk -v a="$total" 'BEGIN { print a / 60 }')" | tee -a "$dir/times.txt"
  grep -E '(passed|failed|error).* in [0-9.]+s' "$dir/test.log" | tail -1 | sed 's/^=* */pytest: /; s/ *=*$//' \
    | tee -a "$dir/times.txt"
  echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$dir/times.txt"
  echo "run $n: $(grep '^total' "$dir/times.txt")  $(grep '^pytest' "$dir/times.txt")" >> "$out/summary.txt"
  rm -rf "$clone" "$home"
done
echo "$([ "$rc" = 0 ] && echo green || echo RED): $runs run(s), machine: $machine, commit $commit" >> "$out/summary.txt"
cat "$out/summary.txt"
exit "$rc"
