#!/usr/bin/env bash
# harness-test/arm64:bookworm, the linux/arm64 image of tests/test_arm64_docker.py (a DGX Spark's
# CPU, emulated): Debian bookworm arm64 (debootstrap minbase + python3, whose Python has no pip,
# and xz-utils for the Docker kit's tar.xz), with, for `python3 -m harness bundle ...` run from a
# checkout mounted in the container:
#   /opt/harness-deps  the harness's imports for `harness bundle` (pydantic, rich and theirs),
#                      aarch64 wheels for Python 3.11 unpacked (versions as installed here)
#   /opt/wheels/{arm64,amd64}  markupsafe 3.0.3 cp311 for each CPU: a small real wheel with a
#                      compiled module (markupsafe/_speedups), 24 and 23 kB
# Needs Debian's qemu-user-static + binfmt-support (the kernel's aarch64 handler runs the
# emulated binaries, in debootstrap's second stage and in Docker), debootstrap, and PyPI.
# Time and size: docs/measured.md. Idempotent: an existing image is kept (--relabel: load an image
# imported before, which the engine labelled amd64, again as arm64).
# usage: tools/arm64-image.sh   (ARM64_IMAGE names another tag; PYTHON the Python with pip)
set -euo pipefail
IMAGE=${ARM64_IMAGE:-harness-test/arm64:bookworm}
PY=${PYTHON:-python3}
cd "$(dirname "$0")/.."
[ "${1:-}" = --relabel ] || ! docker image inspect "$IMAGE" >/dev/null 2>&1 || exit 0
if ! grep -qs '^enabled' /proc/sys/fs/binfmt_misc/qemu-aarch64; then
  echo "arm64-image: this kernel has no aarch64 handler: apt-get install -y qemu-user-static binfmt-support" >&2
  exit 3
fi
command -v debootstrap >/dev/null || { echo "arm64-image: no debootstrap: apt-get install -y debootstrap" >&2; exit 3; }
DEPS="pydantic==2.14.4 pydantic_core==2.50.5 annotated_types==0.8.0 typing_extensions==4.16.0 \
typing_inspection==0.4.5 rich==15.0.0 markdown_it_py==4.3.0 mdurl==0.1.2 pygments==2.21.0"
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
root="$tmp/root"
tags() { "$PY" -c "from harness import platforms as p; print(' '.join('--platform ' + t for t in p.parse('$1').wheel_tags()))"; }
get() {  # get DEST PLATFORM REQUIREMENT...: cp311 wheels for that CPU
  local dest=$1 plat=$2; shift 2
  # shellcheck disable=SC2046
  "$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.11 --implementation cp \
    $(tags "$plat") -d "$dest" "$@"
}
# `docker import --platform linux/arm64` is ignored by Debian's engine 20.10 (the image says
# amd64): tools/relabel-image.sh loads it again with a config that names arm64
load_arm64() {
  docker import --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' "$1" "$IMAGE" >/dev/null
  PYTHON=$PY bash tools/relabel-image.sh "$IMAGE" arm64
}
if [ "${1:-}" = --relabel ]; then  # an image imported before as amd64: the same files, labelled arm64
  PYTHON=$PY bash tools/relabel-image.sh "$IMAGE" arm64
  docker image inspect -f "arm64-image: $IMAGE ({{.Os}}/{{.Architecture}})" "$IMAGE"; exit 0
fi
start=$(date +%s)
debootstrap --arch=arm64 --variant=minbase --include=python3,xz-utils bookworm "$root" >"$tmp/debootstrap.log" 2>&1 \
  || { tail -20 "$tmp/debootstrap.log" >&2; exit 1; }
rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"*
# shellcheck disable=SC2086
get "$tmp/deps" linux/arm64 $DEPS
"$PY" - "$tmp/deps" "$root/opt/harness-deps" <<'EOF'
import pathlib, sys, zipfile
for w in sorted(pathlib.Path(sys.argv[1]).glob("*.whl")):
    zipfile.ZipFile(w).extractall(sys.argv[2])
EOF
get "$root/opt/wheels/arm64" linux/arm64 markupsafe==3.0.3
get "$root/opt/wheels/amd64" linux/amd64 markupsafe==3.0.3
[ "$(chroot "$root" uname -m)" = aarch64 ]  # emulated, through the kernel's handler
tar -C "$root" -c . > "$tmp/layer.tar"
load_arm64 "$tmp/layer.tar"
echo "arm64-image: $IMAGE ($(docker image inspect -f '{{.Os}}/{{.Architecture}}' "$IMAGE"), $(( $(date +%s) - start )) s)"
