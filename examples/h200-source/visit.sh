#!/usr/bin/env bash
# One visit of the air-gapped H200 VM (16 cores, no Docker, no package index, at most 64 MiB per
# command with the checkout, released 30 s after a command ends: run these back to back) that
# serves three purposes at once:
#   - examples/h200-source re-run at main: the source image built, audited (for SM_90, the GPU
#     here, and SM_121, the chip its 12.1a build targets) and its FP8 and NVFP4 cells served;
#   - the wheel image's FP8 cell (examples/h200-docker) on the same machine, so source and wheel
#     are compared there at c=1 and c=8;
#   - the compile cache measured (examples/h200-cache): the same build cold, then with one kernel
#     line changed, then its stock twin, each with its hit rate and wall time.
# Inputs from tools/device-inputs.sh OUT, regrouped so that each command fits beside a checkout
# of ~19 MB (DEV names the folder sent with the command):
#   visit.sh up                 # kit/: dockerd up, the base import started (setsid)
#   visit.sh stage              # hwhl/ + vllm sdist: harness's own dependencies, the sdist kept
#   visit.sh build              # deps/, ccache/ + FlashInfer sdist: sources into the cache, wheelhouse,
#                               # models, ccache into the base, the cold build started (setsid)
#   visit.sh wheels             # w1/, w2/: pieces of the wheel bundle
#   visit.sh wheel-cell DEADLINE   # w3/ (+ the bundle's small part): the wheel image built and audited, its FP8 cell served
#   then examples/h200-cache/device.sh build cold|oneline|stock DEADLINE, visit.sh finish,
#   visit.sh serve K DEADLINE (the source image's cells), examples/h200-cache/device.sh summary
set -u
DEV=${DEV:-$PWD/inputs}
PY=/opt/torch/.venv/bin/python3
OUT=${OUT:-/tmp/out}
SITE=/opt/torch/.venv/lib/python3.12/site-packages
mkdir -p "$OUT" /tmp/src /tmp/wstage
export PYTHONUNBUFFERED=1 PATH=/tmp/dk/bin:$PATH DOCKER_HOST=unix:///tmp/docker.sock HARNESS_CACHE_DIR=/tmp/hcache \
  HARNESS_COMPILE_CACHE_DIR=/tmp/ccstore
harness() { PYTHONPATH="$PWD:/tmp/hsite" "$PY" -m harness "$@"; }
timed_harness() { local b=$1; shift; timeout -s INT "$b" env PYTHONPATH="$PWD:/tmp/hsite" "$PY" -m harness "$@"; }
T_START=$(date +%s)
left() { echo $(( $1 - ($(date +%s) - T_START) - 25 )); }
containers() { echo "--- docker ps -a ($1):"; docker ps -a; echo "--- end"; }

case "${1:-}" in
up)
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv
  nproc; df -h /tmp | tail -1
  source tools/device-docker-up.sh "$DEV/kit/docker-kit.tar.xz" || exit 7
  setsid bash -c "s=\$(date +%s); bash tools/device-base-image.sh h200-root:local > /tmp/base.log 2>&1; \
    echo \"base import: \$(( \$(date +%s) - s )) s, exit \$?\" >> /tmp/base.log; touch /tmp/base.done" \
    < /dev/null > /dev/null 2>&1 &
  echo "base import started"
  ;;
stage)
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/hsite "$DEV"/hwhl/*.whl || exit 8
  cp "$DEV"/src/* /tmp/src/ && ls -la /tmp/src
  "$PY" -m pip list 2>/dev/null | grep -iE "^(setuptools|packaging|protobuf|cmake|ninja|wheel|jinja2|regex|build) " || true
  ;;
build)
  cp "$DEV"/src/* /tmp/src/ && cp tests/fixtures/offline/cutlass-*.tar.xz /tmp/src/
  harness sources fetch -m matrix/h200-source.toml --from /tmp/src || exit 9
  mkdir -p /tmp/stage && cp "$DEV"/deps/part_* "$DEV"/deps/bundle.json /tmp/stage/
  harness bundle install /tmp/stage --dest /tmp/deps-wheelhouse || exit 9
  "$PY" - <<'PYEOF'
import tarfile, glob
with tarfile.open(glob.glob("/tmp/hcache/sdist/vllm-0.25.1.tar.gz")[0]) as t, open("/tmp/words.txt", "w") as out:
    for m in t.getmembers():
        if m.name.endswith(".py") and ("/vllm/engine/" in m.name or "/vllm/config/" in m.name):
            out.write(t.extractfile(m).read().decode("utf-8", "replace"))
PYEOF
  "$PY" tools/make_dummy_models.py /tmp/models /tmp/words.txt || exit 7
  while [ ! -f /tmp/base.done ]; do sleep 2; done; cat /tmp/base.log
  bash tools/ccache-kit.sh add h200-root:local "$DEV/ccache" || exit 7
  harness build -m matrix/h200-source.toml --dry-run 2>&1 | tail -30
  harness doctor -m matrix/h200-source.toml > "$OUT/doctor.txt" 2>&1; tail -14 "$OUT/doctor.txt"
  bash examples/h200-cache/device.sh build cold 1   # starts the cold build (setsid) and returns
  ;;
wheels)
  cp "$DEV"/w/* /tmp/wstage/ && ls /tmp/wstage | wc -l
  ;;
wheel-cell)
  cp "$DEV"/w/* /tmp/wstage/ 2>/dev/null
  mkdir -p /tmp/wparts && cp /tmp/wstage/bundle.json /tmp/wstage/part_02 /tmp/wparts/
  for p in part_00 part_01; do cat /tmp/wstage/"$p".piece* > /tmp/wparts/"$p"; done
  harness bundle install /tmp/wparts --dest /tmp/wheelhouse --site /tmp/site --python "$PY" || exit 9
  "$PY" docker/wheels.py patch --python "$PY" --site /tmp/site patches/wheel/vllm-0.25.1-flash-attn-optional.patch || exit 9
  harness build -m matrix/h200-docker.toml -k docker --log-dir "$OUT" 2>&1 | tail -5
  img=$(docker images vllm-bw --format '{{.Repository}}:{{.Tag}}' | grep docker-0251- | head -1)
  harness audit "$img" -m matrix/h200-docker.toml 2>&1 | tee "$OUT/wheel-audit.txt" | tail -12
  timed_harness "$(left "$2")" run -m matrix/h200-docker.toml -k "docker and fp8" --results /tmp/wresults
  echo "harness run (h200-docker) exit: $?"; containers "after the wheel cell"
  tar czf "$OUT/wheel-results.tgz" -C /tmp wresults
  ;;
finish)  # the cold build's image: labels, the build log kept in it, its audit
  img=$(docker images vllm-bw --format '{{.Repository}}:{{.Tag}}' | grep 'src-0251-amd64-' | head -1)
  [ -n "$img" ] || { echo "no image: the build failed"; tail -40 /tmp/cc-cold/build.out; exit 1; }
  docker image inspect "$img" > "$OUT/image.json"
  docker run --rm --entrypoint cat "$img" /opt/build/vllm-build.log | gzip > "$OUT/vllm-build.log.gz"
  docker run --rm --entrypoint cat "$img" /opt/build/rust-frontend.txt
  harness audit "$img" --cc 12.1 --cc 9.0 --fail-on never 2>&1 | tee "$OUT/audit.txt" | tail -40
  ;;
serve)
  timed_harness "$(left "$3")" run -m matrix/h200-source.toml -k "$2" --results /tmp/results
  echo "harness run exit: $?"; containers "after the run"
  tar czf "$OUT/results.tgz" -C /tmp results
  ;;
*)
  echo "usage: visit.sh up | stage | build | wheels | wheel-cell DEADLINE | finish | serve K DEADLINE"; exit 2 ;;
esac
