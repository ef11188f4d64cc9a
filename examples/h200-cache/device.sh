#!/usr/bin/env bash
# The compile cache measured on the air-gapped H200 VM (16 cores; docker.io 20.10, no buildx):
# the cut vLLM 0.25.1 stack of matrix/h200-source.toml built (a) cold, with an empty cache,
# (b) again with one line of one kernel source changed (matrix/h200-source-oneline.toml: patch
# vllm/0003-*), (c) as its stock twin without patch 0001 (matrix/h200-source-stock.toml). Goals:
# (b) the whole `harness build` within 120 s at a hit rate >= 95 %; (c) a compile <= 35 % of (a)'s.
# Runs after examples/h200-source/device.sh `up` (p1: dockerd, base import) and `stage` (p2:
# sdists and pinned sources), with the same environment; inputs from tools/device-inputs.sh:
#   device.sh prep                  # p3: dependency wheelhouse, base ready (+ ccache from
#                                   #     p3/ccache where the base has none), empty cache, dry runs
#   device.sh build VARIANT DEADLINE  # VARIANT cold | oneline | stock: `harness build` started
#                                   #     (setsid) unless it runs or ran; waited on until it ends or
#                                   #     DEADLINE s have passed (run it again to wait on); then its
#                                   #     wall time and compile-cache figures
#   device.sh summary               # the three side by side, and the goals
# Every build's logs and record (build-<stack>.json: compile_cache with the units it compiled,
# duration_s) and ninja's log of its compile (ninja-log.txt) land under $OUT/<variant>/. Variants run in this order: each uses what the ones before left in the cache.
set -u
DEV=${DEV:-$PWD/inputs}
PY=${PY:-/opt/torch/.venv/bin/python3}
OUT=${OUT:-/tmp/out}
BASE=h200-root:local
mkdir -p "$OUT"
export PYTHONUNBUFFERED=1 PATH=/tmp/dk/bin:$PATH DOCKER_HOST=${DOCKER_HOST:-unix:///tmp/docker.sock} \
  HARNESS_CACHE_DIR=${HARNESS_CACHE_DIR:-/tmp/hcache} HARNESS_COMPILE_CACHE_DIR=/tmp/ccstore
harness() { PYTHONPATH="$PWD:/tmp/hsite" "$PY" -m harness "$@"; }
T_START=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - T_START) - 20 )); }  # less 20 s to pack the results
matrix_of() {
  case "$1" in
    cold) echo matrix/h200-source.toml ;;
    oneline) echo matrix/h200-source-oneline.toml ;;
    stock) echo matrix/h200-source-stock.toml ;;
    *) echo "unknown variant $1 (cold | oneline | stock)" >&2; return 2 ;;
  esac
}
stack_of() { [ "$1" = stock ] && echo src-0251-stock || echo src-0251; }
# the build's figures, from the record `harness build` writes beside its log
figures() {
  local v=$1 rec="/tmp/cc-$1/logs/build-$(stack_of "$1").json"
  [ -f "$rec" ] || { echo "$v: no build record ($rec)"; return 1; }
  "$PY" - "$v" "$rec" "/tmp/cc-$v/wall_s" <<'PYEOF'
import json, sys, pathlib
v, rec, wall = sys.argv[1], json.loads(pathlib.Path(sys.argv[2]).read_text()), pathlib.Path(sys.argv[3])
c = rec.get("compile_cache") or {}
print(f"{v}: status {rec['status']}, harness build wall {wall.read_text().strip() if wall.exists() else '?'} s, "
      f"image build {rec.get('duration_s', 0):.0f} s, compile steps {c.get('seconds_compiling')} s; "
      f"hits {c.get('hits')}, misses {c.get('misses')}, uncacheable {c.get('uncacheable')}, "
      f"hit rate {c.get('hit_rate')}, store errors {c.get('remote_errors')}" + (f"; OFF: {c['off']}" if c.get("off") else ""))
PYEOF
}
pack() {  # $OUT/<variant>/: what the build printed, its log, its record, the image's arch lines
  local v=$1 d="$OUT/$1"; mkdir -p "$d"
  cp /tmp/cc-"$v"/build.out /tmp/cc-"$v"/wall_s "$d/" 2>/dev/null
  cp /tmp/cc-"$v"/logs/*.json "$d/" 2>/dev/null
  [ -f /tmp/cc-"$v"/logs/build-"$(stack_of "$v")".log ] && gzip -c /tmp/cc-"$v"/logs/build-"$(stack_of "$v")".log > "$d/build-$(stack_of "$v").log.gz"
  grep -a "harness-compile-cache\|Building SM12x NVFP4 for archs\|CUDA supported target" \
    /tmp/cc-"$v"/logs/build-"$(stack_of "$v")".log > "$d/cache-and-arch-lines.txt" 2>/dev/null
  harness cache show > "$d/cache-show.txt" 2>&1
  # ninja's log of the compile, kept in the image: each unit's seconds (examples/h200-cache/units.py)
  local img
  img=$("$PY" -c 'import json,sys; print(json.load(open(sys.argv[1])).get("image_ref") or "")' \
        "/tmp/cc-$v/logs/build-$(stack_of "$v").json" 2>/dev/null)
  [ -n "$img" ] && docker run --rm --entrypoint cat "$img" /opt/build/vllm-ninja-log.txt > "$d/ninja-log.txt" 2>/dev/null
}

case "${1:-}" in
prep)
  mkdir -p /tmp/stage && cp "$DEV"/deps/part_* "$DEV"/deps/bundle.json /tmp/stage/ || exit 9
  [ -f /tmp/deps-wheelhouse/wheels.lock ] || harness bundle install /tmp/stage --dest /tmp/deps-wheelhouse || exit 9
  while [ ! -f /tmp/base.done ] && [ "$(left 540)" -gt 0 ]; do sleep 2; done; cat /tmp/base.log
  # the compile steps need ccache in the image: add Debian's where the base has none
  bash tools/ccache-kit.sh add "$BASE" "$DEV/ccache" || exit 7
  rm -rf /tmp/ccstore && harness cache show
  for v in cold oneline stock; do
    echo "--- dry run: $v"; harness build -m "$(matrix_of $v)" --dry-run 2>&1 | tail -25
  done
  nproc; df -h /tmp | tail -1; docker version --format 'engine {{.Server.Version}}'
  ;;
build)
  v=${2:?usage: device.sh build VARIANT DEADLINE}; m=$(matrix_of "$v") || exit 2; deadline=${3:-560}
  d=/tmp/cc-$v; mkdir -p "$d/logs"
  if [ ! -f "$d/started" ]; then
    date -u +%T > "$d/started"
    # wall time of the whole `harness build`, the base check and the audit included
    setsid bash -c "cd $PWD && s=\$(date +%s.%N); PYTHONPATH=$PWD:/tmp/hsite $PY -m harness build -m $m \
      --log-dir $d/logs > $d/build.out 2>&1; echo \"harness build exit \$?\" >> $d/build.out; \
      awk -v s=\$s -v e=\$(date +%s.%N) 'BEGIN { printf \"%.1f\\n\", e - s }' > $d/wall_s; touch $d/done" \
      < /dev/null > /dev/null 2>&1 &
    echo "$v: harness build -m $m started at $(cat "$d/started")"
  fi
  while [ ! -f "$d/done" ] && [ "$(left "$deadline")" -gt 0 ]; do
    sleep 10; echo "$(date -u +%T) $(grep -ao '\[[0-9]*/[0-9]*\]' "$d/logs/build-$(stack_of "$v").log" 2>/dev/null | tail -1)"
  done
  if [ -f "$d/done" ]; then tail -4 "$d/build.out"; figures "$v"; else echo "$v: still building"; fi
  pack "$v"
  ;;
summary)
  for v in cold oneline stock; do figures "$v"; done | tee "$OUT/summary.txt"
  "$PY" - <<'PYEOF' | tee -a "$OUT/summary.txt"
import json, pathlib
def rec(v, stack):
    p = pathlib.Path(f"/tmp/cc-{v}/logs/build-{stack}.json")
    return json.loads(p.read_text()) if p.exists() else None
cold, one, stock = rec("cold", "src-0251"), rec("oneline", "src-0251"), rec("stock", "src-0251-stock")
wall = pathlib.Path("/tmp/cc-oneline/wall_s")
if one and wall.exists():
    c = one.get("compile_cache") or {}
    w = float(wall.read_text())
    print(f"(b) one line changed: harness build {w:.0f} s (goal <= 120), hit rate {c.get('hit_rate')} (goal >= 0.95)")
if cold and stock:
    a = (cold.get("compile_cache") or {}).get("seconds_compiling")
    s = (stock.get("compile_cache") or {}).get("seconds_compiling")
    if a and s is not None:
        print(f"(c) stock twin: compile {s:.0f} s of the cold {a:.0f} s = {100 * s / a:.0f} % (goal <= 35 %)")
PYEOF
  ;;
*)
  echo "usage: device.sh prep | build VARIANT DEADLINE | summary"; exit 2 ;;
esac
