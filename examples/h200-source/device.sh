#!/usr/bin/env bash
# How examples/h200-source was made on an air-gapped H200 VM (no Docker, no package index, at
# most 64 MiB sent with each command including this checkout, released 30 s after a command
# ends: run these back to back). The source image is built and served in one visit (a machine
# comes back bare); the wheel examples (examples/h200-docker, examples/h200) are re-run on the
# idle GPU while it compiles.
# Inputs come from tools/device-inputs.sh OUT (one folder per command; DEV names the folder
# sent with the command, default ./inputs beside the checkout copy):
#   device.sh up                 # p1: harness deps, dockerd, base import started (setsid)
#   device.sh stage              # p2: the sdists and pinned sources, into the harness cache
#   device.sh build              # p3: dependency bundle, models, `harness build` started (setsid)
#   device.sh wheels             # w1, w2: pieces of the wheel bundle, kept in /tmp/wstage
#   device.sh examples DEADLINE  # w3: the wheel examples' FP8 cells, Docker then local
#   device.sh wait DEADLINE      # until the build ends (or DEADLINE s); then image + audit
#   device.sh serve K DEADLINE   # `harness run -k K` on the built image
# DEADLINE: seconds the whole command may take (a run is stopped with SIGINT before it).
set -u
DEV=${DEV:-$PWD/inputs}
PY=/opt/torch/.venv/bin/python3
OUT=${OUT:-/tmp/out}
MATRIX=matrix/h200-source.toml
SITE=/opt/torch/.venv/lib/python3.12/site-packages
mkdir -p "$OUT" /tmp/stage /tmp/wstage
export PYTHONUNBUFFERED=1 PATH=/tmp/dk/bin:$PATH DOCKER_HOST=unix:///tmp/docker.sock HARNESS_CACHE_DIR=/tmp/hcache
harness() { PYTHONPATH="$PWD:/tmp/hsite" "$PY" -m harness "$@"; }
# `timeout -s INT` stops a run as Ctrl-C would: the container is removed, finished cells stay.
timed_harness() { local b=$1; shift; timeout -s INT "$b" env PYTHONPATH="$PWD:/tmp/hsite" "$PY" -m harness "$@"; }
T_START=$(date +%s)
# what is left of a command's DEADLINE seconds, less 25 s to pack the results
left() { echo $(( $1 - ($(date +%s) - T_START) - 25 )); }
progress() { grep -ao '\[[0-9]*/[0-9]*\]' /tmp/blog/build-src-0251.log 2>/dev/null | tail -1; }
containers() { echo "--- docker ps -a ($1):"; docker ps -a; echo "--- end"; }
finish_build() {  # the image, its labels, the audit: once `harness build` has ended
  cp /tmp/build.out "$OUT/build.out"; tar czf "$OUT/build-logs.tgz" -C /tmp blog
  img=$(docker images vllm-bw --format '{{.Repository}}:{{.Tag}}' | grep src-0251- | grep -v probe | head -1)
  [ -n "$img" ] || { echo "no image: the build failed"; tail -40 /tmp/build.out; return 1; }
  docker image inspect "$img" > "$OUT/image.json"
  docker run --rm --entrypoint cat "$img" /opt/build/vllm-build.log | gzip > "$OUT/vllm-build.log.gz"
  site=$(docker run --rm --entrypoint python "$img" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  harness audit "$img" --image-path "$site/vllm" --cc 12.1 --cc 9.0 --fail-on never 2>&1 | tee "$OUT/audit.txt" | tail -40
  docker run --rm --entrypoint python "$img" -c 'import flashinfer; print("flashinfer import", flashinfer.__version__)' 2>&1 | tail -3
}

case "${1:-}" in
up)
  "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/hsite "$DEV"/hwhl/*.whl || exit 8
  nvidia-smi --query-gpu=name,compute_cap,driver_version,memory.total --format=csv
  echo "nvcc: $(command -v nvcc) $(ls -d /usr/local/cuda* 2>/dev/null | tr '\n' ' ')"; gcc --version | head -1
  cmake --version | head -1; nproc; df -h /tmp | tail -1
  source tools/device-docker-up.sh "$DEV/kit/docker-kit.tar.xz" || exit 7
  # the base import takes ~2 minutes: it runs on while the next commands bring their inputs
  setsid bash -c "s=\$(date +%s); bash tools/device-base-image.sh h200-root:local > /tmp/base.log 2>&1; \
    echo \"base import: \$(( \$(date +%s) - s )) s, exit \$?\" >> /tmp/base.log; touch /tmp/base.done" \
    < /dev/null > /dev/null 2>&1 &
  echo "base import started"
  ;;
stage)
  harness sources fetch -m "$MATRIX" --from "$DEV/src" || exit 9
  cat /tmp/base.log 2>/dev/null
  ;;
build)
  cp "$DEV"/deps/part_* "$DEV"/deps/bundle.json /tmp/stage/
  [ -d "$DEV/w" ] && cp "$DEV"/w/* /tmp/wstage/
  t0=$(date +%s)
  harness bundle install /tmp/stage --dest /tmp/deps-wheelhouse || exit 9
  # models: config + a word-level tokenizer made from vLLM's own source text
  "$PY" - <<'PYEOF'
import tarfile, glob
with tarfile.open(glob.glob("/tmp/hcache/sdist/vllm-0.25.1.tar.gz")[0]) as t, open("/tmp/words.txt", "w") as out:
    for m in t.getmembers():
        if m.name.endswith(".py") and ("/vllm/engine/" in m.name or "/vllm/config/" in m.name):
            out.write(t.extractfile(m).read().decode("utf-8", "replace"))
PYEOF
  "$PY" tools/make_dummy_models.py /tmp/models /tmp/words.txt || exit 7
  while [ ! -f /tmp/base.done ]; do sleep 2; done; cat /tmp/base.log
  echo "deps + models + wait for base: $(( $(date +%s) - t0 )) s"
  setsid bash -c "cd $PWD && s=\$(date +%s); PYTHONPATH=$PWD:/tmp/hsite $PY -m harness build -m $MATRIX \
    --log-dir /tmp/blog > /tmp/build.out 2>&1; echo \"harness build exit \$? after \$(( \$(date +%s) - s )) s\" >> /tmp/build.out; \
    touch /tmp/build.done" < /dev/null > /dev/null 2>&1 &
  echo "harness build started at $(date -u +%T)"
  harness doctor -m "$MATRIX" > "$OUT/doctor.txt" 2>&1; tail -12 "$OUT/doctor.txt"
  ;;
wheels)
  cp "$DEV"/w/* /tmp/wstage/ && ls -la /tmp/wstage; echo "build: $(progress)"
  ;;
examples)
  # the wheel bundle's parts came in pieces (each command carries the checkout as well)
  cp "$DEV"/w/* /tmp/wstage/ 2>/dev/null
  mkdir -p /tmp/wparts && cp /tmp/wstage/bundle.json /tmp/wstage/part_02 /tmp/wparts/
  for p in part_00 part_01; do cat /tmp/wstage/"$p".piece* > /tmp/wparts/"$p"; done
  harness bundle install /tmp/wparts --dest /tmp/wheelhouse --site /tmp/site --python "$PY" || exit 9
  "$PY" docker/wheels.py patch --python "$PY" --site /tmp/site patches/wheel/vllm-0.25.1-flash-attn-optional.patch || exit 9
  echo "build: $(progress)"
  # examples/h200-docker: the wheel stack's image, its audit, the FP8 cell in Docker
  harness build -m matrix/h200-docker.toml -k docker --log-dir "$OUT" 2>&1 | tail -5
  img=$(docker images vllm-bw --format '{{.Repository}}:{{.Tag}}' | grep docker-0251- | head -1)
  harness audit "$img" --image-path "$SITE/vllm" -m matrix/h200-docker.toml 2>&1 | tee "$OUT/wheel-audit.txt" | tail -12
  timed_harness "$(( $(left "$2") - 200 ))" run -m matrix/h200-docker.toml -k "docker and fp8" --results /tmp/wresults
  echo "harness run (h200-docker) exit: $?"; containers "after the Docker example"; echo "build: $(progress)"
  # examples/h200: the local runner on the same install
  timed_harness "$(left "$2")" run -m matrix/h200-local.toml -k "fp8" --results /tmp/lresults
  echo "harness run (h200-local) exit: $?"; echo "build: $(progress)"
  tar czf "$OUT/wheel-results.tgz" -C /tmp wresults lresults
  ;;
wait)
  while [ ! -f /tmp/build.done ] && [ "$(left "$2")" -gt 0 ]; do sleep 15; echo "$(date -u +%T) $(progress)"; done
  if [ -f /tmp/build.done ]; then tail -5 /tmp/build.out; finish_build; else echo "still building"; fi
  ;;
serve)
  timed_harness "$(left "$3")" run -m "$MATRIX" -k "$2" --results /tmp/results
  echo "harness run exit: $?"; containers "after the run"
  tar czf "$OUT/results.tgz" -C /tmp results
  ;;
*)
  echo "usage: device.sh up | stage | build | wheels | examples DEADLINE | wait DEADLINE | serve K DEADLINE"; exit 2 ;;
esac
