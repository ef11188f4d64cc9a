#!/usr/bin/env bash
# A local base image with a CUDA toolchain, for source builds where no CUDA base image can be
# pulled: Debian (harness-test/debian-python, tools/base-images.sh) + build-essential, git and
# the Python headers and ccache from Debian + this host's CUDA toolkit (CUDA_HOME, default /usr/local/cuda:
# nvcc 13.0) + torch 2.11.0 and the CUDA libraries it loads, cmake and ninja from PyPI (wheels
# cached in ~/.cache/vllm-bw-harness/wheels, ~4 GB the first time). A minimal toolkit lacks
# cuBLAS headers and nvrtc: the nvidia wheels supply them, and a libcuda stub links without a
# driver. What a Dockerfile.vllm.in `offline` stack on a local base needs: Python + headers,
# torch, nvcc, cmake >= 3.26, ninja. Idempotent (an existing image is kept).
# usage: tools/toolchain-base.sh [TAG]     (default harness-test/toolchain:cu130)
set -euo pipefail
tag=${1:-harness-test/toolchain:cu130}
PY=${PYTHON:-python3}
# The build requirements of the stack the probe test builds (matrix/h200-source.toml, src-0251),
# as harness reads them from its pinned vLLM and FlashInfer sdists: the template's base stage
# checks them and, with no index (an offline stack), cannot install what is missing.
reqs=$("$PY" - <<'PYEOF'
from harness import platforms
from harness.image.requirements import for_stack
from harness.matrix.load import load_matrix
m = load_matrix("matrix/h200-source.toml")
print(for_stack("src-0251", m.spec.stacks["src-0251"], platforms.host()).file_text(), end="")
PYEOF
)
want=$(printf '%s' "$reqs" | sha256sum | cut -c1-16)
have_reqs() { [ "$(docker image inspect -f '{{index .Config.Labels "harness.toolchain.build-requirements"}}' "$tag" 2>/dev/null)" = "$want" ]; }
add_reqs() {  # a layer on the toolchain image with the build requirements (wheels from PyPI)
  local ctx; ctx=$(mktemp -d)
  printf '%s\n' "$reqs" | sed 's/  #.*//' | grep -v '^#' | grep . > "$ctx/build-requirements.txt"
  local pyver; pyver=$(docker run --rm "$tag" python -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
  "$PY" -m pip download -q --only-binary=:all: --python-version "$pyver" -d "$ctx/w" -r "$ctx/build-requirements.txt"
  cat > "$ctx/Dockerfile" <<DOCKERFILE
FROM $tag
COPY w /tmp/w
COPY build-requirements.txt /tmp/build-requirements.txt
RUN python -m pip install -q --no-index --find-links /tmp/w -r /tmp/build-requirements.txt && rm -rf /tmp/w
LABEL harness.toolchain.build-requirements=$want
DOCKERFILE
  docker build -q -t "$tag" "$ctx" >/dev/null
  rm -rf "$ctx"
  echo "toolchain-base: $tag has the build requirements ($want)"
}
if docker image inspect "$tag" >/dev/null 2>&1; then
  # made before the compile cache: ccache added on top, under the same tag
  if ! docker run --rm --entrypoint sh "$tag" -c 'command -v ccache' >/dev/null 2>&1; then
    ctx=$(mktemp -d)
    printf '%s\n' "FROM $tag" 'RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends ccache >/dev/null && rm -rf /var/lib/apt/lists/*' > "$ctx/Dockerfile"
    docker build -q -t "$tag" "$ctx" >/dev/null
    rm -rf "$ctx"
    echo "toolchain-base: ccache added to $tag"
  fi
  have_reqs && { echo "toolchain-base: $tag already there"; exit 0; }
  add_reqs; exit 0
fi
cuda=${CUDA_HOME:-/usr/local/cuda}
[ -x "$cuda/bin/nvcc" ] || { echo "toolchain-base: no $cuda/bin/nvcc (set CUDA_HOME)" >&2; exit 1; }
wheels=${HARNESS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm-bw-harness}/wheels
mkdir -p "$wheels"
pyver=$(docker run --rm harness-test/debian-python:bookworm python3 -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
# this host's platform tags (x86_64 glibc like the image's), the image's Python version
"$PY" -m pip download -q --only-binary=:all: --python-version "$pyver" \
  -d "$wheels" "torch==2.11.0" "cmake==3.31.10" "ninja>=1.11"
ctx=$(mktemp -d); trap 'rm -rf "$ctx"' EXIT
cp -a "$(readlink -f "$cuda")" "$ctx/cuda"
mkdir "$ctx/wheels"; ln "$wheels"/*.whl "$ctx/wheels/" 2>/dev/null || cp "$wheels"/*.whl "$ctx/wheels/"
cat > "$ctx/Dockerfile" <<'DOCKERFILE'
FROM harness-test/debian-python:bookworm
RUN apt-get update -qq && apt-get install -y -qq --no-install-recommends build-essential git python3-dev \
      python3-venv xz-utils ccache >/dev/null && rm -rf /var/lib/apt/lists/* && python3 -m venv /opt/torch/.venv
COPY cuda /usr/local/cuda
COPY wheels /tmp/wheels
RUN /opt/torch/.venv/bin/pip install -q --no-index --no-deps --no-compile /tmp/wheels/*.whl && rm -rf /tmp/wheels \
 && nv=$(/opt/torch/.venv/bin/python -c 'import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))')/nvidia/cu13 \
 && for f in "$nv"/lib/*.so*; do [ -e /usr/local/cuda/lib64/${f##*/} ] || ln -s "$f" /usr/local/cuda/lib64/; done \
 && for l in libnvrtc libcublas libcublasLt; do [ -e /usr/local/cuda/lib64/$l.so ] \
      || ln -s "$(ls /usr/local/cuda/lib64/$l.so.* | head -1)" /usr/local/cuda/lib64/$l.so; done \
 && ln -s "$nv/include" /usr/local/cuda/include/nvidia-wheels \
 && mkdir -p /usr/local/cuda/lib64/stubs && echo 'int cuGetErrorString(){return 0;}' > /tmp/c.c \
 && gcc -shared -o /usr/local/cuda/lib64/stubs/libcuda.so /tmp/c.c && rm /tmp/c.c
ENV PATH=/opt/torch/.venv/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    CPATH=/usr/local/cuda/include/nvidia-wheels
LABEL harness.role=test-image harness.test=toolchain-base
DOCKERFILE
docker build -q -t "$tag" "$ctx" >/dev/null
add_reqs
docker image inspect -f "toolchain-base: $tag {{.Size}} bytes" "$tag"
