#!/usr/bin/env bash
# FlashInfer 0.7.2.post1's AOT step, as the default stacks run it, timed on a GPU host with no
# network and no Docker (an air-gapped H200 VM: 16 cores, nvcc 13.0, GCC 13.3, Python 3.12 with
# torch 2.11.0+cu130), for the Spark's 12.1a and the RTX Pro 6000's 12.0a side by side, then audited.
#
# As the stacks run it (docker/Dockerfile.vllm.in, harness/image/render.py): from FlashInfer's
# source tree, FLASHINFER_CUDA_ARCH_LIST=<the stack's list> MAX_JOBS=<the stack's max_jobs, 8>,
# `python -m flashinfer.aot --out-dir OUT --build-dir BUILD`; the tree carries flashinfer/data/cccl
# as the image's `pip install .` leaves it there (FlashInfer's build backend copies 3rdparty/cccl
# to it, and the AOT step compiles with `-I flashinfer/data/cccl/...`). Through aot_timed.py: the
# same FlashInfer entry point, its families compiled one after the other, serving path first
# (FP4 GEMM, FP4 quantize, CUTLASS fused MoE, FA2 attention for head dim 128, sampling/norm), so
# that what serving needs is measured even when the whole step does not fit. The two arch lists
# run at once, MAX_JOBS each: 16 compile jobs on 16 cores. They take the serving families in
# opposite orders (12.1a: FP4 GEMM first; 12.0a: attention first, FIRST_12_0A), so that in a visit
# too short for either to finish, each serving family is measured on at least one of them (the same
# sources for another target: the other list's time for it is then an estimate from this one).
#
# Inputs: tools/flashinfer-aot-inputs.sh [OUT] makes .fi-aot-inputs/ (git-ignored, ~30 MB: start/ and
# audit/), carried with `start` (which keeps audit/ in the work folder for `collect`).
#   device.sh start          unpack, check the toolchain, start both AOT runs (setsid) and a
#                            memory/load sampler; returns at once (~1 min)
#   device.sh wait S         wait up to S seconds (<= 590) for both runs, printing progress;
#                            run it again to wait on
#   device.sh collect        stop what still runs (what finished is kept), per-module and
#                            per-family times with the whole step measured or ESTIMATED (named
#                            so), `harness audit` of every finished module (12.1a judged for a
#                            12.1 chip, 12.0a for 12.0), all in one tarball under $OUT (<= 16 MiB)
# Environment: DEV (inputs, default $PWD/.fi-aot-inputs), PY (default python3), OUT (default
# /tmp/out), ARCHS (default "12.1a 12.0a"), JOBS (default 8: matrix/spark.toml and
# matrix/rtx-pro-6000.toml max_jobs), ONLY (module names: a partial AOT list, for a test run),
# AUDIT_SERVING_S / AUDIT_REST_S (collect's audit time for the serving families / the rest: 300 / 150),
# W (work folder, default /tmp/fi-aot).
set -u
REPO=$(cd "$(dirname "$0")/../.." && pwd)
DEV=${DEV:-$PWD/.fi-aot-inputs}
PY=${PY:-python3}
OUT=${OUT:-/tmp/out}
W=${W:-/tmp/fi-aot}
ARCHS=${ARCHS:-12.1a 12.0a}
JOBS=${JOBS:-8}
ONLY=${ONLY:-}
# the 12.0a run's first families (empty: the usual order, the one 12.1a keeps)
FIRST_12_0A=${FIRST_12_0A-attention_fa2_hd128 sampling_norm fp4_quantize fused_moe_cutlass gemm_sm12x}
mkdir -p "$W" "$OUT"
cc_of() { local a=${1%[af]}; echo "$a"; }  # 12.1a -> 12.1: the chip a build is judged for

toolchain() {  # what the AOT step needs from the host, found or supplied; says what it did
  # the toolkit nvcc belongs to: where it lies beside include/cuda_runtime.h (a /usr/local/bin/nvcc
  # link or wrapper script would give /usr/local), else /usr/local/cuda
  if [ -z "${CUDA_HOME:-}" ]; then
    CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)")")")
    [ -f "$CUDA_HOME/include/cuda_runtime.h" ] || CUDA_HOME=/usr/local/cuda
  fi
  export CUDA_HOME
  export PATH="$CUDA_HOME/bin:$PATH"
  local nv; nv=$("$PY" -c 'import os, nvidia; print(os.path.join(list(nvidia.__path__)[0], "cu13"))' 2>/dev/null)
  # headers of CUDA libraries a toolkit of nvcc alone lacks (the fmha_v2 generator's host tool
  # includes cublasLt.h, the FP4 quantization kernels curand_kernel.h): torch's CUDA wheels have them
  local h
  for h in cublasLt.h curand_kernel.h; do
    if [ ! -f "$CUDA_HOME/include/$h" ] && [ -f "$nv/include/$h" ] && [[ ":${CPATH:-}:" != *":$nv/include:"* ]]; then
      export CPATH="$nv/include${CPATH:+:$CPATH}"; echo "$h: from torch's CUDA wheels ($nv/include)"
    fi
  done
  # FlashInfer links every module with -L$CUDA_HOME/lib64 -L$CUDA_HOME/lib64/stubs -lcudart -lcuda
  local ld="$W/ld"; mkdir -p "$ld"; local extra=""
  if [ ! -e "$CUDA_HOME/lib64/libcudart.so" ] && [ -e "$nv/lib/libcudart.so.13" ]; then
    ln -sf "$nv/lib/libcudart.so.13" "$ld/libcudart.so"; extra=1
  fi
  if [ ! -e "$CUDA_HOME/lib64/stubs/libcuda.so" ] && [ ! -e "$CUDA_HOME/lib64/libcuda.so" ]; then
    local drv; drv=$(ldconfig -p 2>/dev/null | awk '/libcuda\.so\.1 /{print $NF; exit}')
    if [ -n "$drv" ]; then ln -sf "$drv" "$ld/libcuda.so"; extra=1
    else  # no driver here either (a build machine): a stub to link against, as CUDA's own stubs are
      echo 'int cuGetErrorString(void){return 0;}' > "$ld/stub.c" && gcc -shared -o "$ld/libcuda.so" "$ld/stub.c" \
        -Wl,-soname,libcuda.so.1 && extra=1 && echo "libcuda: none on this host, linked against a stub"
    fi
  fi
  if [ -n "$extra" ]; then
    export FLASHINFER_EXTRA_LDFLAGS="-L$ld"; echo "link: FLASHINFER_EXTRA_LDFLAGS=-L$ld ($(ls "$ld" | tr '\n' ' '))"
  fi
}

install_missing() {  # $1: wheel folder; the rest: "module=wheel-prefix" pairs; one pip run, into $W/site
  local dir=$1; shift; local want=()
  for pair in "$@"; do
    "$PY" -c "import ${pair%%=*}" 2>/dev/null || want+=("$dir/${pair#*=}"-*.whl)
  done
  [ ${#want[@]} -eq 0 ] && return 0
  wheels_into_site "${want[@]}" \
    && echo "installed what the host lacks: $(for w in "${want[@]}"; do basename $w; done | tr '\n' ' ')"
}
wheels_into_site() {  # pip --target where the Python has pip, else the wheels unpacked (they are zips)
  if "$PY" -m pip --version >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --target "$W/site" "$@"
  else
    local w; for w in "$@"; do "$PY" -m zipfile -e "$w" "$W/site" || return 1; done
    [ -x "$W/site/ninja/data/bin/ninja" ] && mkdir -p "$W/site/bin" && ln -sf "$W/site/ninja/data/bin/ninja" "$W/site/bin/ninja"
    chmod +x "$W"/site/nvidia/cu13/bin/* 2>/dev/null; return 0
  fi
}
# what start installs and toolchain() supplies, for every verb
export PATH="$W/site/bin:$PATH" PYTHONPATH="$W/site${PYTHONPATH:+:$PYTHONPATH}"

case "${1:-}" in
start)
  T0=$(date +%s)
  mkdir -p "$W/site"
  if [ ! -d "$W/src/flashinfer" ]; then
    (cd "$DEV" && sha256sum -c --quiet <(grep ' start/' SHA256SUMS)) || { echo "inputs: sha256 mismatch"; exit 9; }
    mkdir -p "$W/src" && xz -dc "$DEV/start/flashinfer-src.tar.xz" | tar -x -C "$W/src" || exit 9
    mkdir -p "$W/src/flashinfer/data" && cp -a "$W/src/3rdparty/cccl" "$W/src/flashinfer/data/cccl"
  fi
  install_missing "$DEV/start/w" tvm_ffi=apache_tvm_ffi einops=einops click=click tabulate=tabulate \
    tqdm=tqdm urllib3=urllib3 idna=idna certifi=certifi charset_normalizer=charset_normalizer requests=requests \
    filelock=filelock packaging=packaging
  if ! command -v ninja >/dev/null; then  # FlashInfer runs `ninja` from PATH: the wheel's, in $W/site/bin
    wheels_into_site "$DEV"/start/w/ninja-*.whl && echo "installed ninja"
  fi
  # the audit's inputs wait here for `collect` (which then needs nothing carried)
  [ -d "$DEV/audit" ] && [ ! -d "$W/audit-inputs" ] && cp -r "$DEV/audit" "$W/audit-inputs"
  toolchain > "$W/toolchain.txt"; cat "$W/toolchain.txt"  # not in a pipe: its exports must stay
  {
    echo "date: $(date -u +%FT%TZ)"; echo "CUDA_HOME: $CUDA_HOME"; echo "CPATH: ${CPATH:-}"; echo "host: $(nproc) CPUs, $(free -g | awk '/Mem:/{print $2}') GiB, $(uname -srm)"
    echo "nvcc: $(nvcc --version | tail -2 | head -1)"; echo "gcc: $(gcc --version | head -1)"
    echo "ninja: $(ninja --version)"; echo "python: $("$PY" -V 2>&1)"
    "$PY" -c 'import torch, tvm_ffi; print("torch:", torch.__version__, "cuda", torch.version.cuda); print("apache-tvm-ffi:", tvm_ffi.__version__)'
    echo "archs: $ARCHS; MAX_JOBS: $JOBS each; ONLY: ${ONLY:-all}; 12.0a first: ${FIRST_12_0A:-usual order}"
    cat "$W/toolchain.txt"
    nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | sed 's/^/gpu: /'
  } | tee "$W/env.txt"
  (cd "$W/src" && "$PY" -c 'import flashinfer.aot') 2>&1 | tail -3  # from the tree: fails here, not in a worker
  for arch in $ARCHS; do
    d=$W/a-$arch; mkdir -p "$d"
    [ -f "$d/started" ] && { echo "$arch: already started"; continue; }
    date +%s > "$d/started"
    only=${ONLY:+--only $ONLY}
    first=""; [ "$arch" = 12.0a ] && first=${FIRST_12_0A:+--first $FIRST_12_0A}
    # shellcheck disable=SC2086
    setsid bash -c "echo \$\$ > '$d/pid'; cd '$W/src' && FLASHINFER_CUDA_ARCH_LIST='$arch' MAX_JOBS='$JOBS' \
      '$PY' '$REPO/examples/flashinfer-aot/aot_timed.py' --log '$d/log' $only $first \
      -- --out-dir '$d/out' --build-dir '$d/build' > '$d/aot.out' 2>&1; echo \$? > '$d/exit'" \
      < /dev/null > /dev/null 2>&1 &
    echo "$arch: flashinfer.aot started (MAX_JOBS=$JOBS), log $d/aot.out"
  done
  if [ ! -f "$W/sampler.pid" ]; then
    setsid bash -c "echo \$\$ > '$W/sampler.pid'; while :; do echo \"\$(date +%s) \$(awk '/MemAvailable/{print int(\$2/1048576)}' /proc/meminfo) \$(cut -d' ' -f1 /proc/loadavg)\" >> '$W/mem.tsv'; sleep 5; done" \
      < /dev/null > /dev/null 2>&1 &
  fi
  echo "start: $(( $(date +%s) - T0 )) s"
  ;;
wait)
  limit=${2:-580}; [ "$limit" -gt 590 ] && limit=590
  end=$(( $(date +%s) + limit ))
  while :; do
    line="$(date -u +%T)"; alldone=1
    for arch in $ARCHS; do
      d=$W/a-$arch
      total=$("$PY" -c 'import json,sys; print(len(json.load(open(sys.argv[1]))))' "$d/log/plan.json" 2>/dev/null || echo "?")
      done_n=$(find "$d/build/cached_ops" -mindepth 2 -maxdepth 2 -name '*.so' 2>/dev/null | wc -l)
      fam=$(tail -1 "$d/log/events.tsv" 2>/dev/null | cut -f1,2,7)
      [ -f "$d/exit" ] && state="exit $(cat "$d/exit")" || { state=running; alldone=""; }
      line="$line | $arch: $done_n/$total modules, $state, last: ${fam:-none}"
    done
    echo "$line"
    [ -n "$alldone" ] && break
    [ "$(date +%s)" -ge "$end" ] && break
    sleep 30
  done
  ;;
collect)
  T0=$(date +%s)
  for arch in $ARCHS; do  # stop what still runs: the sessions these commands started
    d=$W/a-$arch
    if [ ! -f "$d/exit" ] && [ -f "$d/pid" ]; then
      kill -TERM -- "-$(cat "$d/pid")" 2>/dev/null; sleep 3; kill -KILL -- "-$(cat "$d/pid")" 2>/dev/null
      echo "stopped by collect at $(date +%s)" > "$d/exit"; echo "$arch: stopped (what finished is kept)"
    fi
  done
  [ -f "$W/sampler.pid" ] && kill -TERM -- "-$(cat "$W/sampler.pid")" 2>/dev/null && rm -f "$W/sampler.pid"
  R=$W/report; rm -rf "$R"; mkdir -p "$R"
  toolchain > /dev/null
  # the audit: the harness from this checkout, its dependencies where the host lacks them
  AUD=$DEV/audit/w; [ -d "$AUD" ] || AUD=$W/audit-inputs/w
  if [ -d "$AUD" ]; then
    install_missing "$AUD" pydantic=pydantic pydantic_core=pydantic_core annotated_types=annotated_types \
      typing_inspection=typing_inspection tomli_w=tomli_w tenacity=tenacity docker=docker isal=isal \
      rich=rich markdown_it=markdown_it_py mdurl=mdurl pygments=pygments typing_extensions=typing_extensions
    # the toolkit's cuobjdump and nvdisasm where it has them, else the wheels' (one pip run: a second
    # --target run into the same nvidia/ folder would skip it)
    if ! command -v nvdisasm >/dev/null || ! command -v cuobjdump >/dev/null; then
      [ -x "$W/site/nvidia/cu13/bin/nvdisasm" ] || wheels_into_site \
        "$AUD"/nvidia_cuda_cuobjdump-*.whl "$AUD"/nvidia_cuda_nvdisasm-*.whl
    fi
  fi
  export PATH="$PATH:$W/site/nvidia/cu13/bin" PYTHONPATH="$REPO:$PYTHONPATH"
  serving=$("$PY" -c 'import sys; sys.path.insert(0, sys.argv[1]); import flashinfer_aot_plan as p; print(" ".join(p.serving_families()))' "$REPO/tools")
  runs=(); ninja=(); audits=()
  for arch in $ARCHS; do
    d=$W/a-$arch; [ -f "$d/log/plan.json" ] || { echo "$arch: never got to its module list"; continue; }
    cp "$d/build/cached_ops/.ninja_log" "$R/ninja-$arch.log" 2>/dev/null
    runs+=(--run "$arch=$d/log"); ninja+=(--ninja-log "$arch=$R/ninja-$arch.log")
    # every module whose .so was linked, hard-linked (no copies) into two folders: the serving
    # path's families, audited first and given more time, and the rest
    rm -rf "$W/audit-$arch"; mkdir -p "$W/audit-$arch/serving" "$W/audit-$arch/rest"
    "$PY" - "$d/log/plan.json" "$d/build/cached_ops" "$W/audit-$arch" "$serving" <<'PYEOF'
import json, os, sys
plan, built, dest, serving = json.load(open(sys.argv[1])), sys.argv[2], sys.argv[3], sys.argv[4].split()
for m in plan:
    so = os.path.join(built, m["name"], m["name"] + ".so")
    if os.path.isfile(so):
        where = os.path.join(dest, "serving" if m["family"] in serving else "rest", m["name"])
        os.makedirs(where)
        os.link(so, os.path.join(where, m["name"] + ".so"))
PYEOF
    for part in serving rest; do
      [ "$part" = serving ] && limit=${AUDIT_SERVING_S:-300} || limit=${AUDIT_REST_S:-150}
      [ -n "$(ls "$W/audit-$arch/$part")" ] || continue
      ( s=$(date +%s); timeout "$limit" "$PY" -m harness audit "$W/audit-$arch/$part" --cc "$(cc_of "$arch")" --json \
          > "$R/audit-$arch-$part.json" 2> "$R/audit-$arch-$part.err"
        echo "$arch $part: audit exit $? in $(( $(date +%s) - s )) s, $(ls "$W/audit-$arch/$part" | wc -l) modules" ) &
      audits+=(--audit "$arch=$R/audit-$arch-$part.json")
    done
  done
  wait
  "$PY" "$REPO/examples/flashinfer-aot/timings.py" "${runs[@]}" "${ninja[@]}" "${audits[@]}" --jobs "$JOBS" --out "$R" \
    > "$R/timings.out" 2>&1; echo "timings exit $?"; head -60 "$R/summary.md" 2>/dev/null
  # one tarball: the runs' own files, the report, the environment; the audits compressed
  P=$W/pack; rm -rf "$P"; mkdir -p "$P"
  cp "$W/env.txt" "$W/mem.tsv" "$P/" 2>/dev/null
  cp -r "$R" "$P/report"; gzip -9 "$P"/report/*.json "$P"/report/ninja-*.log 2>/dev/null
  for arch in $ARCHS; do
    d=$W/a-$arch; mkdir -p "$P/a-$arch"
    cp "$d"/log/events.tsv "$d"/log/plan.json "$d/exit" "$d/started" "$P/a-$arch/" 2>/dev/null
    tail -n 3000 "$d/aot.out" 2>/dev/null | gzip -9 > "$P/a-$arch/aot.out.tail.gz"
  done
  tar -C "$P" -czf "$OUT/flashinfer-aot.tar.gz" .
  size=$(stat -c %s "$OUT/flashinfer-aot.tar.gz")
  if [ "$size" -gt 16000000 ]; then  # the audits go first, then the ninja logs
    rm -f "$P"/report/audit-*.json.gz; tar -C "$P" -czf "$OUT/flashinfer-aot.tar.gz" .
    echo "tarball over 16 MB: left out the audit JSON (summary.json keeps each module's audit)"
  fi
  ls -la "$OUT/flashinfer-aot.tar.gz"; echo "collect: $(( $(date +%s) - T0 )) s"
  ;;
*)
  echo "usage: device.sh start | wait SECONDS | collect   (see the header)"; exit 2 ;;
esac
