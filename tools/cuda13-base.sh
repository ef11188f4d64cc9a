#!/usr/bin/env bash
# A stand-in for nvidia/cuda:13.0.1-devel-ubuntu24.04 where no registry can be pulled, for one
# CPU platform: Debian bookworm (debootstrap --variant=minbase, from Debian's mirror) + the
# CUDA 13.0 compiler from PyPI's NVIDIA wheels (nvcc, its crt headers and nvvm, the runtime)
# laid out as /usr/local/cuda + this host's CA bundle (pip inside the build then trusts what
# the host trusts: a host behind a TLS-inspecting proxy needs it). What it is NOT: Ubuntu 24.04
# (Debian's Python is 3.11, Ubuntu's 3.12; GCC 12, not 13), and not NVIDIA's full toolkit
# (no cuBLAS/cuDNN headers): enough for the template's Python packaging path (apt's Python,
# torch from its index, the build requirements, setup.py, nvcc -V), which is what the packaging
# probe runs; a kernel compile needs the real image.
#
# Another CPU (linux/arm64 on an x86-64 host, the DGX Spark's platform) runs under Debian's
# qemu-user-static through binfmt_misc: debootstrap's second stage and every RUN of a build.
# usage: tools/cuda13-base.sh [linux/amd64|linux/arm64] [TAG]
#   default platform: this host's; default tag harness-test/cuda13:bookworm-<amd64|arm64>
# Idempotent (an existing image is kept). Needs root, Debian's mirror, PyPI, a Docker engine.
set -euo pipefail
plat=${1:-}
if [ -z "$plat" ]; then
  case "$(uname -m)" in x86_64) plat=linux/amd64 ;; aarch64) plat=linux/arm64 ;; *) echo "cuda13-base: unknown CPU $(uname -m)" >&2; exit 3 ;; esac
fi
case "$plat" in
  linux/amd64|amd64|x86_64) short=amd64; machine=x86_64 ;;
  linux/arm64|arm64|aarch64) short=arm64; machine=aarch64 ;;
  *) echo "cuda13-base: unknown platform $plat (linux/amd64 or linux/arm64)" >&2; exit 2 ;;
esac
tag=${2:-harness-test/cuda13:bookworm-$short}
PY=${PYTHON:-python3}
# Debian's engine 20.10 ignores `import --platform`: tools/relabel-image.sh says the real CPU
relabel() { PYTHON=$PY bash "$(dirname "$0")/relabel-image.sh" "$tag" "$short"; }
if docker image inspect "$tag" >/dev/null 2>&1; then relabel; echo "cuda13-base: $tag already there"; exit 0; fi
need() { command -v "$1" >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$2" >/dev/null; }; }
need debootstrap debootstrap
need unzip unzip
if [ "$machine" != "$(uname -m)" ]; then
  need qemu-aarch64-static qemu-user-static
  need update-binfmts binfmt-support
  [ -e /proc/sys/fs/binfmt_misc/status ] || mount -t binfmt_misc binfmt_misc /proc/sys/fs/binfmt_misc
  update-binfmts --enable >/dev/null 2>&1 || true
  [ -e "/proc/sys/fs/binfmt_misc/qemu-$machine" ] \
    || { echo "cuda13-base: no binfmt handler for $machine: qemu-user-static is not registered" >&2; exit 3; }
fi
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
t0=$(date +%s)
debootstrap --arch="$short" --variant=minbase bookworm "$tmp/root" >"$tmp/debootstrap.log" 2>&1 \
  || { tail -20 "$tmp/debootstrap.log" >&2; exit 1; }
rm -rf "$tmp/root/var/cache/apt/archives/"*.deb "$tmp/root/var/lib/apt/lists/"*
echo "cuda13-base: debootstrap $short: $(( $(date +%s) - t0 )) s"
# the CUDA 13.0 compiler for this CPU from PyPI (py3-none wheels: no Python version to match)
"$PY" -m pip download -q --no-deps --only-binary=:all: -d "$tmp/whl" \
  --platform "manylinux_2_28_$machine" --platform "manylinux_2_17_$machine" --platform "manylinux2014_$machine" \
  "nvidia-cuda-nvcc==13.0.*" "nvidia-cuda-crt==13.0.*" "nvidia-nvvm==13.0.*" "nvidia-cuda-runtime==13.0.*"
mkdir -p "$tmp/cu"
for w in "$tmp"/whl/*.whl; do unzip -q -o "$w" 'nvidia/cu13/*' -d "$tmp/cu"; done
mkdir -p "$tmp/root/usr/local/cuda-13.0"
cp -a "$tmp/cu/nvidia/cu13/." "$tmp/root/usr/local/cuda-13.0/"
ln -sfn cuda-13.0 "$tmp/root/usr/local/cuda"
[ -d "$tmp/root/usr/local/cuda/lib" ] && [ ! -e "$tmp/root/usr/local/cuda/lib64" ] && ln -s lib "$tmp/root/usr/local/cuda/lib64"
install -D -m 644 /etc/ssl/certs/ca-certificates.crt "$tmp/root/opt/harness/host-ca.crt"
tar -C "$tmp/root" -c . | docker import --platform "linux/$short" \
  --change 'ENV PATH=/usr/local/cuda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV CUDA_HOME=/usr/local/cuda PIP_CERT=/opt/harness/host-ca.crt SSL_CERT_FILE=/opt/harness/host-ca.crt REQUESTS_CA_BUNDLE=/opt/harness/host-ca.crt' \
  --change 'LABEL harness.role=test-image harness.test=cuda13-base' \
  - "$tag" >/dev/null
relabel
docker image inspect -f "cuda13-base: $tag is {{.Os}}/{{.Architecture}}" "$tag"
docker run --rm "$tag" sh -c 'echo "uname -m: $(uname -m)"; nvcc --version | tail -2'
echo "cuda13-base: $tag in $(( $(date +%s) - t0 )) s"
