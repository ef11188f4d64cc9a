#!/usr/bin/env bash
# The wall time the FA3 patch saves, measured where there are cores to measure it (the 2-core
# build machine only counts the steps): the stock vLLM 0.25.1 configure for 12.1a, then
# `ninja -jJOBS _vllm_fa3_C` alone, timed; record.json "build" holds the wall seconds and the
# step-minutes from .ninja_log. What the patch removes from a whole build is exactly this target
# (setup.py no longer asks for it), so its step-minutes are the saving; its wall time alone,
# with every core busy, is an upper bound of the wall time saved inside a whole build.
# Needs the toolchain image (tools/toolchain-base.sh) and the real source trees vLLM 0.25.1
# pins, unpacked (e.g. from `harness sources fetch -m matrix/h200-source.toml --out DIR`):
# flash-attention WITH its csrc/cutlass headers (the compile reads them), CUTLASS, QuTLASS, FlashMLA.
# usage: FA_SRC=... CUTLASS_SRC=... QUTLASS_SRC=... FLASHMLA_SRC=... \
#        examples/upstream-reports/fa3-without-fa3-archs/measure.sh SDIST OUT [JOBS]
set -euo pipefail
[ $# -ge 2 ] || { sed -n 2,12p "$0" >&2; exit 2; }
for v in FA_SRC CUTLASS_SRC QUTLASS_SRC FLASHMLA_SRC; do
  [ -d "${!v:-}" ] || { echo "measure: set $v to the unpacked tree" >&2; exit 2; }
done
[ -d "$FA_SRC/csrc/cutlass/include/cutlass" ] || { echo "measure: $FA_SRC has no csrc/cutlass headers (its pinned CUTLASS)" >&2; exit 2; }
root=$(cd "$(dirname "$0")/../../.." && pwd)
BUILD_TARGET=_vllm_fa3_C JOBS=${3:-$(nproc)} "$root/tools/configure-targets.sh" "$1" 12.1a "$2"
python3 -c 'import json,sys; b=json.load(open(sys.argv[1]))["build"]; print(json.dumps(b, indent=1))' "$2/record.json"
