#!/usr/bin/env bash
# vLLM's CMake configure of one sdist in the toolchain image, and what its build graph compiles:
# writes OUT/configure.log, OUT/fa3-targets.txt and OUT/record.json (tools/configure_targets.py
# says what is in them; `harness bug --configure OUT/record.json` reads the record). No GPU, no
# network (FETCHCONTENT_FULLY_DISCONNECTED): the sources vLLM would fetch come from folders.
# usage: tools/configure-targets.sh SDIST ARCH_LIST OUT [PATCH...]
# env:   IMAGE (default harness-test/toolchain:cu130, made by tools/toolchain-base.sh)
#        CUTLASS_SRC FA_SRC QUTLASS_SRC FLASHMLA_SRC DEEPGEMM_SRC (and, for 0.33.0, DEEPSELECT_SRC
#        FLASHKDA_SRC TML_FA4_SRC TRITON_KERNELS_SRC FMHA_SM100_SRC): source trees (an empty folder
#        stands in for one not given: enough for a configure whose arch list does not build it)
#        and their pins as CUTLASS_PIN, FA_PIN, ... (recorded as given)
#        BUILD_TARGET: compile these ninja targets (separated by spaces) after the configure and
#        time them (record.json "build": wall, step and CPU minutes, each step's seconds), with
#        JOBS parallel steps (default: the CPUs); it needs the real trees
#        COMMANDS=1: also OUT/commands.json, each object's compile command (ninja -t compdb)
set -euo pipefail
[ $# -ge 3 ] || { sed -n 2,12p "$0" >&2; exit 2; }
sdist=$(readlink -f "$1"); arch=$2; out=$3; shift 3
image=${IMAGE:-harness-test/toolchain:cu130}
docker image inspect "$image" >/dev/null 2>&1 || { echo "configure-targets: no image $image (run tools/toolchain-base.sh)" >&2; exit 2; }
mkdir -p "$out"; out=$(readlink -f "$out")
here=$(cd "$(dirname "$0")" && pwd)
mounts=(-v "$sdist:/in/$(basename "$sdist"):ro" -v "$here/configure_targets.py:/in/configure_targets.py:ro" -v "$out:/out")
sources="{"; sep=""; n=0
for spec in cutlass:VLLM_CUTLASS_SRC_DIR:CUTLASS flash-attention:VLLM_FLASH_ATTN_SRC_DIR:FA \
            qutlass:QUTLASS_SRC_DIR:QUTLASS flashmla:FLASH_MLA_SRC_DIR:FLASHMLA deepgemm:DEEPGEMM_SRC_DIR:DEEPGEMM \
            triton_kernels:TRITON_KERNELS_SRC_DIR:TRITON_KERNELS fmha_sm100:FMHA_SM100_SRC_DIR:FMHA_SM100 \
            deepselect:DEEPSELECT_SRC_DIR:DEEPSELECT flashkda:FLASH_KDA_SRC_DIR:FLASHKDA tml_fa4:TML_FA4_SRC_DIR:TML_FA4; do
  IFS=: read -r name var pre <<<"$spec"
  dir_var=${pre}_SRC; pin_var=${pre}_PIN
  if [ -n "${!dir_var:-}" ]; then
    mounts+=(-v "$(readlink -f "${!dir_var}"):/src/$name:ro"); dir=/src/$name; pin=${!pin_var:-unpinned}
  else
    dir=/tmp/empty-$name; pin="(empty folder)"
  fi
  sources+="$sep\"$name\": {\"env\": \"$var\", \"dir\": \"$dir\", \"pin\": \"$pin\"}"; sep=", "
done
sources+="}"
patch_args=()
if [ -n "${BUILD_TARGET:-}" ]; then  # one or more ninja targets, separated by spaces
  for t in $BUILD_TARGET; do patch_args+=(--build-target "$t"); done
  patch_args+=(--jobs "${JOBS:-$(nproc)}")
fi
[ -n "${COMMANDS:-}" ] && patch_args+=(--commands)
for p in "$@"; do
  mounts+=(-v "$(readlink -f "$p"):/in/patches/$(basename "$p"):ro"); patch_args+=(--patch "/in/patches/$(basename "$p")")
done
image_id=$(docker image inspect -f '{{.Id}}' "$image")
# a stand-in base's harness.base.* labels (how it differs from the registry's) go into the record
base_labels=$(docker image inspect -f '{{json .Config.Labels}}' "$image" | python3 -c \
  'import json, sys; print(json.dumps({k: v for k, v in (json.load(sys.stdin) or {}).items() if k.startswith("harness.base.")}))')
docker run --rm --label harness.role=configure-targets --network none -e HARNESS_TOOLCHAIN_IMAGE="$image ($image_id)" \
  -e HARNESS_BASE_LABELS="$base_labels" \
  "${mounts[@]}" "$image" bash -c 'mkdir -p /tmp/empty-cutlass /tmp/empty-flash-attention /tmp/empty-qutlass \
    /tmp/empty-flashmla /tmp/empty-deepgemm /tmp/empty-triton_kernels /tmp/empty-fmha_sm100 /tmp/empty-deepselect \
    /tmp/empty-flashkda /tmp/empty-tml_fa4 && exec python /in/configure_targets.py "$@"' \
  _ --sdist "/in/$(basename "$sdist")" --arch-list "$arch" --out /out --sources "$sources" "${patch_args[@]}"
