#!/usr/bin/env bash
# A stand-in for nvidia/cuda:13.0.1-devel-ubuntu24.04 that builds vLLM 0.33.0's kernels, where no
# registry can be pulled: Debian 13 trixie (debootstrap --variant=minbase from Debian's mirror)
# + trixie's gcc-13/g++-13 as the default compilers (vLLM 0.33.0's CMake requires GCC >= 13,
# CMakeLists.txt:1695; Ubuntu 24.04 has 13.3, trixie's default is 14, so 13 is picked to match)
# + Python 3.13 with a venv at /opt/venv + ccache, git, xz from Debian
# + torch 2.14.0 and the CUDA 13.0 toolkit it pins (cuda-toolkit==13.0.3: nvcc, crt, nvvm, cccl,
#   cudart, cuBLAS, cuSPARSE, cuSOLVER, cuRAND, cuFFT, nvrtc, nvJitLink, NVTX, CUPTI) from PyPI's
#   NVIDIA wheels, laid out as /usr/local/cuda (one copy: the venv's nvidia/cu13 folder) with
#   unversioned .so links and a libcuda stub, as the devel image has them
# + cmake, ninja and the build requirements of vLLM 0.33.0 and FlashInfer 0.7.2.post1 (read from
#   their sdists by harness/image/requirements.py, as tools/toolchain-base.sh does).
#
# What it is NOT, and says so in its labels (harness.base.*), which every image built FROM it
# inherits, so every probe record names them (harness/image/probe.py keeps them):
#   OS Debian 13 (registry: Ubuntu 24.04); GCC trixie's 13 (registry: Ubuntu's 13.3); Python 3.13
#   (registry image + stack: 3.12; trixie has no 3.12, vLLM 0.33.0 takes >=3.11,<3.15); CUDA from
#   PyPI wheels at the versions torch 2.14.0 pins (registry: NVIDIA's 13.0.1 toolkit in
#   /usr/local/cuda, torch's own wheels beside it); torch from PyPI (the matrices: the cu130 index,
#   which this machine cannot reach; PyPI's 2.14.0 Linux wheel is the CUDA 13.0 build too).
#
# usage: tools/cuda13-devel-base.sh [TAG]      (default harness-test/cuda13-devel:trixie)
# Idempotent (an existing image is kept). Needs root, Debian's mirror, PyPI, a Docker engine;
# this host's CPU only (x86-64 here). Wheels are kept in $HARNESS_CACHE_DIR/wheels/cuda13-devel-cp313
# (~4 GB); prints the time of each phase and the bytes downloaded.
set -euo pipefail
tag=${1:-harness-test/cuda13-devel:trixie}
PY=${PYTHON:-python3}
TORCH=2.14.0
CUDA_TOOLKIT=13.0.3  # what torch 2.14.0's METADATA pins: cuda-toolkit[...]==13.0.3
EXTRAS=nvcc,crt,nvvm,cccl,cudart,cublas,cusparse,cusolver,curand,cufft,nvrtc,nvjitlink,nvtx,cupti
here=$(cd "$(dirname "$0")/.." && pwd)
case "$(uname -m)" in
  x86_64) plat=linux/amd64 ;;
  aarch64) plat=linux/arm64 ;;
  *) echo "cuda13-devel-base: unknown CPU $(uname -m)" >&2; exit 3 ;;
esac
if docker image inspect "$tag" >/dev/null 2>&1; then echo "cuda13-devel-base: $tag already there"; exit 0; fi
need() { command -v "$1" >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null; }; }
need debootstrap debootstrap
t0=$(date +%s); phase() { echo "cuda13-devel-base: $1: $(( $(date +%s) - ${2:-$t0} )) s"; }
wheels=${HARNESS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/vllm-bw-harness}/wheels/cuda13-devel-cp313
mkdir -p "$wheels"
ctx=$(mktemp -d); trap 'rm -rf "$ctx"' EXIT

# 1. the root file system (minbase: apt, dpkg, coreutils; the rest comes in the Dockerfile)
t=$(date +%s)
root_tag=harness-test/trixie-root:${plat#linux/}
if ! docker image inspect "$root_tag" >/dev/null 2>&1; then
  debootstrap --variant=minbase trixie "$ctx/root" >"$ctx/debootstrap.log" 2>&1 \
    || { tail -20 "$ctx/debootstrap.log" >&2; exit 1; }
  rm -rf "$ctx/root/var/cache/apt/archives/"*.deb "$ctx/root/var/lib/apt/lists/"*
  tar -C "$ctx/root" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --change 'LABEL harness.role=test-image harness.test=trixie-root' - "$root_tag" >/dev/null
  rm -rf "$ctx/root"
fi
phase "debootstrap trixie (minbase) + import" "$t"

# 2. the wheels, for Python 3.13 on this CPU (torch's CUDA libraries, the toolkit, the build requirements)
t=$(date +%s)
reqs=$(PYTHONPATH=$here "$PY" - <<'PYEOF'
from harness import platforms
from harness.image.requirements import for_stack
from harness.matrix.load import load_matrix
m = load_matrix("matrix/spark.toml")  # vLLM 0.33.0 + FlashInfer 0.7.2.post1, as every default stack
print(for_stack("spark-121a", m.spec.stacks["spark-121a"], platforms.host()).file_text(), end="")
PYEOF
)
printf '%s\n' "$reqs" | sed 's/  #.*//' | grep -v '^#' | grep . > "$ctx/build-requirements.txt"
tags=$(PYTHONPATH=$here "$PY" -c "from harness import platforms; print(' '.join('--platform ' + t for t in platforms.host().wheel_tags()))")
before=$(du -sb "$wheels" | cut -f1)
# shellcheck disable=SC2086  # the --platform list is meant to split
"$PY" -m pip download -q --only-binary=:all: --python-version 3.13 --implementation cp $tags -d "$wheels" \
  "torch==$TORCH" "cuda-toolkit[$EXTRAS]==$CUDA_TOOLKIT" -r "$ctx/build-requirements.txt"
after=$(du -sb "$wheels" | cut -f1)
echo "cuda13-devel-base: wheels: $(( (after - before) / 1048576 )) MiB downloaded now, $(( after / 1048576 )) MiB in $wheels"
phase "pip download" "$t"

# 3. the image: Debian's packages in a build step; the wheels installed from a read-only mount
# in a container then committed (a COPY of ~4 GB of wheels would stay in the image as a layer)
t=$(date +%s)
cp "$ctx/build-requirements.txt" "$wheels/.build-requirements.txt"
cat > "$ctx/Dockerfile" <<DOCKERFILE
FROM $root_tag
SHELL ["/bin/bash", "-o", "pipefail", "-c"]
# gcc-13 rather than trixie's default 14: Ubuntu 24.04 (the registry base) compiles with 13
RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \\
      gcc-13 g++-13 make libc6-dev python3 python3-dev python3-venv git ccache xz-utils ca-certificates >/dev/null \\
 && rm -rf /var/lib/apt/lists/* \\
 && for t in gcc g++ cpp; do ln -s /usr/bin/\$t-13 /usr/local/bin/\$t; done \\
 && ln -s /usr/bin/gcc-13 /usr/local/bin/cc && ln -s /usr/bin/g++-13 /usr/local/bin/c++ \\
 && mkdir -p -m 1777 /tmp && python3 -m venv /opt/venv
DOCKERFILE
docker build -q -t "$tag-apt" "$ctx" >/dev/null
phase "apt layer (gcc-13, Python 3.13, git, ccache)" "$t"
t=$(date +%s)
cid=$(docker create -v "$wheels:/tmp/wheels:ro" "$tag-apt" bash -c '
  set -euo pipefail
  /opt/venv/bin/python -m pip install -q --no-index --no-compile --no-cache-dir --find-links /tmp/wheels \
    "torch=='"$TORCH"'" "cuda-toolkit['"$EXTRAS"']=='"$CUDA_TOOLKIT"'" -r /tmp/wheels/.build-requirements.txt
  nv=$(/opt/venv/bin/python -c "import nvidia, os; print(os.path.dirname(nvidia.__path__[0]))")/nvidia/cu13
  ln -s "$nv" /usr/local/cuda-13.0 && ln -s cuda-13.0 /usr/local/cuda
  [ -e "$nv/lib64" ] || ln -s lib "$nv/lib64"
  for f in "$nv"/lib/lib*.so.*; do b=${f%%.so.*}.so; [ -e "$b" ] || ln -s "${f##*/}" "$b"; done
  mkdir -p "$nv/lib/stubs"
  [ -e "$nv/lib/stubs/libcuda.so" ] || { echo "int cuGetErrorString(){return 0;}" > /tmp/c.c \
    && gcc -shared -o "$nv/lib/stubs/libcuda.so" /tmp/c.c && rm /tmp/c.c; }')
trap 'docker rm -f "$cid" >/dev/null 2>&1; rm -rf "$ctx"' EXIT
docker start -a "$cid"
docker commit \
  --change 'ENV PATH=/opt/venv/bin:/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV VIRTUAL_ENV=/opt/venv CUDA_HOME=/usr/local/cuda CC=gcc-13 CXX=g++-13 CUDAHOSTCXX=g++-13' \
  --change 'LABEL harness.role=test-image harness.test=cuda13-devel-base' \
  --change 'CMD ["bash"]' "$cid" "$tag" >/dev/null
docker rm "$cid" >/dev/null
docker image rm "$tag-apt" >/dev/null
phase "pip install torch, the CUDA wheels, the build requirements + /usr/local/cuda" "$t"

# 4. what the image really holds, read from it, as labels (the differences from the registry base)
facts=$(docker run --rm "$tag" bash -c '
  . /etc/os-release; echo "os=$PRETTY_NAME"
  echo "gcc=$(gcc -dumpfullversion)"
  echo "python=$(python -c "import platform; print(platform.python_version())")"
  echo "nvcc=$(nvcc --version | sed -n "s/.*release \([0-9.]*\), V\([0-9.]*\).*/\2/p")"
  echo "torch=$(python -c "import torch; print(torch.__version__, torch.version.cuda)")"
  echo "cmake=$(cmake --version | head -1 | cut -d" " -f3)"')
get() { printf '%s\n' "$facts" | sed -n "s/^$1=//p"; }
cat > "$ctx/Dockerfile" <<DOCKERFILE
FROM $tag
LABEL harness.base.stand-in-for="nvidia/cuda:13.0.1-devel-ubuntu24.04" \\
      harness.base.made-by="tools/cuda13-devel-base.sh" \\
      harness.base.os="$(get os) (registry base: Ubuntu 24.04)" \\
      harness.base.gcc="$(get gcc), Debian's gcc-13 (registry base: Ubuntu's GCC 13.3)" \\
      harness.base.python="$(get python) (registry base and matrix: 3.12; trixie has no 3.12)" \\
      harness.base.cuda="nvcc $(get nvcc) and CUDA 13.0 libraries from PyPI wheels, cuda-toolkit==$CUDA_TOOLKIT as torch $TORCH pins it (registry base: NVIDIA's 13.0.1 toolkit)" \\
      harness.base.torch="$(get torch) from PyPI (matrix: the cu130 index)" \\
      harness.base.cmake="$(get cmake)"
DOCKERFILE
docker build -q -t "$tag" "$ctx" >/dev/null
docker image inspect -f '{{range $k, $v := .Config.Labels}}{{if ge (len $k) 12}}{{if eq (slice $k 0 12) "harness.base"}}{{$k}}={{$v}}{{"\n"}}{{end}}{{end}}{{end}}' "$tag"
docker image inspect -f "cuda13-devel-base: $tag {{.Size}} bytes" "$tag"
phase "total"
