#!/usr/bin/env bash
# Times `make test` in this checkout phase by phase, as a fresh clone meets it: the venv
# (`make install`), the Docker engine and base images (`make docker-up`), the test images and
# packages (`make test-deps`), then `make test` itself, whose prerequisites are then in place, so
# its time is the suite's. Writes OUT/times.txt (one "phase seconds" line each, the machine and
# the load average before and after) and each phase's log beside it.
#   usage: tools/time-make-test.sh OUT        (run it in a fresh clone: it makes .venv there)
# What a fresh machine would download again, this does too: pip runs without its cache
# (PIP_NO_CACHE_DIR=1) and the sdists go to an empty HARNESS_CACHE_DIR, removed at the end.
# Images, Debian packages and a Docker engine already on the machine are kept and reused:
# their cost is not in these figures (docs/measured.md lists them).
set -uo pipefail
out=${1:?usage: tools/time-make-test.sh OUT}
mkdir -p "$out"
out=$(cd "$out" && pwd)
cd "$(dirname "$0")/.."
[ -e .venv ] && { echo "time-make-test: .venv exists here: run it in a fresh clone" >&2; exit 2; }
cache=$(mktemp -d)
trap 'rm -rf "$cache"' EXIT
export PIP_NO_CACHE_DIR=1 HARNESS_CACHE_DIR="$cache"
times="$out/times.txt"
{
  echo "machine: $(nproc) cores, $(awk '/MemTotal/ {printf "%.0f GiB", $2 / 1048576}' /proc/meminfo)," \
       "$(sed -n 's/^model name\s*: //p' /proc/cpuinfo | head -1)"
  echo "commit: $(git rev-parse --short HEAD 2>/dev/null || echo '?')  started: $(date -u '+%F %T') UTC"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} > "$times"
total=0
rc=0
for phase in install docker-up test-deps test; do
  start=$(date +%s.%N)
  make "$phase" > "$out/$phase.log" 2>&1
  code=$?
  secs=$(echo "$(date +%s.%N) - $start" | bc)
  total=$(echo "$total + $secs" | bc)
  printf '%-10s %7.1f s  (exit %d)  load %s\n' "$phase" "$secs" "$code" "$(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$times"
  [ "$code" = 0 ] || rc=$code
done
printf '%-10s %7.1f s\n' total "$total" | tee -a "$times"
grep -E '^[0-9]+ (passed|failed)|(passed|failed|skipped).* in [0-9.]+s' "$out/test.log" | tail -1 | sed 's/^/pytest: /' | tee -a "$times"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" >> "$times"
exit "$rc"
