#!/usr/bin/env bash
# What the test suite needs besides Python and Docker, from Debian, when root with apt:
#   chromium         the report's browser test (renders report.html headless)   ~113 MB of .debs
#   docker-registry  the lock test's registry on localhost                      ~5 MB
#   openssh-server   the ssh:// engine test (sshd on a free localhost port)    ~2 MB
#   qemu-user-static + binfmt-support  the arm64 test (emulated linux/arm64)  ~40 MB
# and, where a Docker engine answers, harness-test/ray (tools/ray-image.sh: ray from PyPI) for
# the multi-node tests, and harness-test/arm64:bookworm (tools/arm64-image.sh: debootstrap
# --arch=arm64 + a few aarch64 wheels from PyPI, after registering the kernel's aarch64 handler
# where no init system did) for the arm64 tests. harness-test/cuda13-devel:trixie
# (tools/cuda13-devel-base.sh: 3.1 GB of wheels, a 6.7 GB image, ~9 min on 2 cores) for the vLLM
# 0.33.0 configure test is built with the toolchain, when asked. harness-test/toolchain:cu130 (tools/toolchain-base.sh: torch 2.11.0 +
# CUDA libraries from PyPI, 2.6 GB of wheels cached the first time, an 8.6 GB image, ~6 min on
# 2 cores) for the source-build probe test is built only when asked: HARNESS_TOOLCHAIN=1 or
# HARNESS_REQUIRE_TOOLCHAIN=1 (CI), or `make test-toolchain`; without it that test skips and says so.
# Elsewhere nothing is installed: those tests skip, and the last lines of `make test` say which
# and why. Idempotent: what is there is kept.
set -euo pipefail
toolchain_asked() { [ "${HARNESS_TOOLCHAIN:-}" = 1 ] || [ "${HARNESS_REQUIRE_TOOLCHAIN:-}" = 1 ]; }
# `--say`: print the list only (`make test` says it first, before installing anything).
if [ "${1:-}" = "--say" ]; then
  cat <<'SAY'
make test: what it may install or fetch, when missing (nothing is removed afterwards):
  .venv: the package with its test and audit extras from PyPI (~75 MB, a 317 MB venv)
  a Docker engine: Debian's docker.io when none answers (root + apt only), and two local
    base images from busybox-static and debootstrap (2 MB and 161 MB; tools/base-images.sh)
  from Debian (root + apt only): chromium (~113 MB of .debs), docker-registry (~5 MB),
    openssh-server (~2 MB), qemu-user-static + binfmt-support (~40 MB)
  Docker image harness-test/ray (ray 2.60.0 wheels from PyPI, a 415 MB image) for the
    multi-node tests
  the kernel's aarch64 handler (root: mounts binfmt_misc and enables qemu-aarch64 where no
    init system did) and Docker image harness-test/arm64:bookworm (debootstrap --arch=arm64,
    emulated, and 4 MB of aarch64 wheels from PyPI) for the arm64 tests
  during the tests: the vLLM 0.33.0 and 0.25.1 and FlashInfer 0.7.2.post1 sdists from PyPI
    (136 MB, unpacked to ~690 MB in ~/.cache/vllm-bw-harness) for the patch and source tests
  without root + apt, or without PyPI, the tests that need them skip (listed at the end)
SAY
  if toolchain_asked; then
    echo "  asked for (HARNESS_TOOLCHAIN=1 or HARNESS_REQUIRE_TOOLCHAIN=1), where nvcc is:"
  else
    echo "  not by default (that test runs where the image is; \`make test-toolchain\` builds it):"
  fi
  cat <<'SAY'
    Docker image harness-test/toolchain:cu130 for the source-build probe test: torch 2.11.0
    and CUDA wheels from PyPI (2.6 GB, cached), an 8.6 GB image, ~6 min on 2 cores
    Docker image harness-test/cuda13:bookworm-<amd64|arm64> for the packaging probe test of a
    default stack (tools/cuda13-base.sh: debootstrap + PyPI's nvcc, ~2 min); the test's build
    then downloads torch 2.14.0, its CUDA libraries and vLLM's runtime requirements (several GB)
    Docker image harness-test/cuda13-devel:trixie for the vLLM 0.33.0 configure test
    (tools/cuda13-devel-base.sh: debootstrap trixie + gcc-13 from Debian, torch 2.14.0 and the
    CUDA 13.0 wheels from PyPI: 3.1 GB of wheels, a 6.7 GB image, ~9 min on 2 cores)
SAY
  exit 0
fi
want=()
command -v chromium >/dev/null || command -v chromium-browser >/dev/null || want+=(chromium)
command -v docker-registry >/dev/null || want+=(docker-registry)
[ -x /usr/sbin/sshd ] || want+=(openssh-server)
[ -x /usr/bin/qemu-aarch64-static ] || want+=(qemu-user-static binfmt-support)
ray_image() {
  if docker info >/dev/null 2>&1; then
    # the two images at once: each waits on downloads much of its time (its output follows)
    arm64_log=$(mktemp)
    { PYTHON=${PYTHON:-python3} bash "$(dirname "$0")/arm64-image.sh" \
        || echo "test-deps: the arm64 image could not be built (the reason is above): the arm64 tests will skip"
    } > "$arm64_log" 2>&1 &
    arm64=$!
    PYTHON=${PYTHON:-python3} bash "$(dirname "$0")/ray-image.sh" \
      || echo "test-deps: the Ray image could not be built: the multi-node tests will skip"
    wait "$arm64" || true
    cat "$arm64_log"; rm -f "$arm64_log"
    if toolchain_asked && [ -x "${CUDA_HOME:-/usr/local/cuda}/bin/nvcc" ]; then
      PYTHON=${PYTHON:-python3} bash "$(dirname "$0")/toolchain-base.sh" \
        || echo "test-deps: the toolchain base could not be built: the source-build probe test will skip"
    fi
    if toolchain_asked; then
      PYTHON=${PYTHON:-python3} bash "$(dirname "$0")/cuda13-base.sh" \
        || echo "test-deps: the CUDA 13 stand-in base could not be built: the packaging probe test will skip"
    fi
    if toolchain_asked; then
      PYTHON=${PYTHON:-python3} bash "$(dirname "$0")/cuda13-devel-base.sh" \
        || echo "test-deps: the CUDA 13 devel stand-in could not be built: the vLLM 0.33.0 configure test will skip"
    fi
  fi
}
[ ${#want[@]} -eq 0 ] && { echo "test-deps: chromium, docker-registry, sshd and qemu-user-static are installed"; ray_image; exit 0; }
if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
  echo "test-deps: not installing ${want[*]} (needs root + apt-get): the tests that need them will skip"
  exit 0
fi
echo "test-deps: installing ${want[*]} from Debian"
apt-get update -qq
DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${want[@]}" >/dev/null \
  || echo "test-deps: apt-get could not install ${want[*]}: the tests that need them will skip"
ray_image
