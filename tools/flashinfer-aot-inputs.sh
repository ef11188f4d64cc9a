#!/usr/bin/env bash
# The inputs of examples/flashinfer-aot/device.sh (FlashInfer 0.7.2.post1's AOT step, timed, on a
# host with no network and no package index: an air-gapped H200 VM with Python 3.12, torch
# 2.11.0+cu130, nvcc 13.0, GCC 13.3), made here into a git-ignored folder of the checkout, one
# folder per device command so that each travels with the checkout (64 MiB a command in all):
#   OUT/start/flashinfer-src.tar.xz  FlashInfer 0.7.2.post1's PyPI sdist (sha256 checked against
#                                    matrix/spark.toml) less what its AOT step never reads: tests/,
#                                    the egg-info, CUTLASS's examples/, python/, test/, docs/, media/
#                                    (the AOT step reads cutlass/include and cutlass/tools/util/include)
#   OUT/start/w/                     what `import flashinfer.aot` and its ninja need that such a host
#                                    may lack (device.sh installs only the ones missing there)
#   OUT/audit/w/                     the harness's own dependencies and CUDA 13's cuobjdump and
#                                    nvdisasm, for `harness audit` at `device.sh collect`
#   OUT/SHA256SUMS
# usage: tools/flashinfer-aot-inputs.sh [--python-version X.Y] [OUT]     (default OUT: .fi-aot-inputs,
#        default X.Y: 3.12, the VM's; give the local Python's to test device.sh here)
# Needs network (PyPI) once: the sdist is cached by the harness (~/.cache/vllm-bw-harness/sources).
set -euo pipefail
pyver=3.12
if [ "${1:-}" = --python-version ]; then pyver=${2:?--python-version needs X.Y}; shift 2; fi
cd "$(dirname "$0")/.."
out=$(realpath -m "${1:-.fi-aot-inputs}")
PY=${PY:-python3}
tag=cp${pyver/./}
# the wheels: the versions tests/test_flashinfer_aot_docker.py and this folder's example ran with
START="apache-tvm-ffi==0.1.15.post2 ninja==1.13.2 einops==0.8.2 click==8.5.1 tabulate==0.10.0 tqdm==4.70.1
requests==2.34.2 urllib3==2.8.0 idna==3.21 certifi==2026.10.19.post1 charset-normalizer==3.5.3
filelock==4.3.2 packaging==26.4"
# the harness's runtime dependencies a bare Python 3.12 lacks (as tools/device-inputs.sh), and the
# CUDA 13 binary tools the audit runs (harness/audit/tools.py finds them on PATH)
AUDIT="docker==7.2.0 tenacity==9.2.1 pydantic==2.14.4 pydantic_core==2.50.5 annotated_types==0.8.0
typing_inspection==0.4.5 tomli_w==1.2.0 isal==1.9.1 rich==15.0.0 markdown-it-py==4.3.0 mdurl==0.1.2
pygments==2.21.0 typing_extensions==4.16.0 nvidia-cuda-cuobjdump==13.2.86 nvidia-cuda-nvdisasm==13.2.86"
mkdir -p "$out/start/w" "$out/audit/w"
sdist=$(PYTHONPATH=$PWD "$PY" - <<'PYEOF'
from harness.image import sources
from harness.matrix.load import load_matrix
stack = load_matrix("matrix/spark.toml").spec.stacks["spark-121a"]
print(sources.sdist(sources.flashinfer_source(stack)))
PYEOF
)
[ -f "$out/start/flashinfer-src.tar.xz" ] || {
  tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
  tar xzf "$sdist" -C "$tmp"
  top=$(ls "$tmp")
  tar -C "$tmp/$top" -cf - --exclude=./tests --exclude=./flashinfer_python.egg-info \
    --exclude=./3rdparty/cutlass/examples --exclude=./3rdparty/cutlass/python --exclude=./3rdparty/cutlass/test \
    --exclude=./3rdparty/cutlass/docs --exclude=./3rdparty/cutlass/media . \
    | xz -T2 -6 > "$out/start/flashinfer-src.tar.xz.part"
  mv "$out/start/flashinfer-src.tar.xz.part" "$out/start/flashinfer-src.tar.xz"
}
plat="--platform manylinux_2_28_x86_64 --platform manylinux_2_24_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64"
# shellcheck disable=SC2086
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp $plat \
  -d "$out/start/w" $START
# shellcheck disable=SC2086
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$pyver" --implementation cp $plat \
  -d "$out/audit/w" $AUDIT
ls "$out/start/w" | grep -q "$tag\|py3-none\|abi3" || { echo "flashinfer-aot-inputs: no wheel for $tag" >&2; exit 1; }
(cd "$out" && find start audit -type f ! -name '*.part' | sort | xargs sha256sum > SHA256SUMS)
du -sh "$out/start" "$out/audit"
