#!/usr/bin/env bash
# harness-test/arm64:bookworm, the linux/arm64 image of tests/test_arm64_docker.py (a DGX Spark's
# CPU, emulated): Debian bookworm arm64 (the files of debootstrap minbase + python3, whose Python
# has no pip, and xz-utils for the Docker kit's tar.xz), with, for `python3 -m harness bundle ...`
# run from a checkout mounted in the container:
#   /opt/harness-deps  the harness's imports for `harness bundle` (pydantic, rich and theirs),
#                      aarch64 wheels for Python 3.11 unpacked (versions as installed here)
#   /opt/wheels/{arm64,amd64}  markupsafe 3.0.3 cp311 for each CPU: a small real wheel with a
#                      compiled module (markupsafe/_speedups), 24 and 23 kB
# Needs Debian's qemu-user-static + binfmt-support (the kernel's aarch64 handler runs the
# emulated binaries, in debootstrap's second stage and in Docker), debootstrap, and PyPI.
# The handler is registered here first, image or not (it is the kernel's, gone after a reboot):
# where no init system does it (a container, a bare CI machine), root mounts binfmt_misc and
# enables qemu-aarch64 (update-binfmts, else qemu-user-static's own binfmt.d line); where the
# kernel or the rights do not allow it, it says which step failed, and exits 3.
# Time and size: docs/measured.md. Idempotent: an existing image is kept (--relabel: load an image
# imported before, which the engine labelled amd64, again as arm64; --register: the handler only).
# usage: tools/arm64-image.sh [--register|--relabel]  (ARM64_IMAGE names another tag; PYTHON the Python with pip)
set -euo pipefail
IMAGE=${ARM64_IMAGE:-harness-test/arm64:bookworm}
PY=${PYTHON:-python3}
cd "$(dirname "$0")/.."
BINFMT=/proc/sys/fs/binfmt_misc
HANDLER=$BINFMT/qemu-aarch64
CONF=/usr/lib/binfmt.d/qemu-aarch64.conf  # qemu-user-static's registration, in the kernel's format
no_handler() {
  echo "arm64-image: no aarch64 handler in this kernel: $*; the arm64 tests will skip" \
       "(HARNESS_REQUIRE_ARM64=1 fails them)" >&2
  exit 3
}
register() {
  grep -qs '^enabled' "$HANDLER" && return 0
  [ -x /usr/libexec/qemu-binfmt/aarch64-binfmt-P ] || [ -r "$CONF" ] \
    || no_handler "qemu-user-static is not installed (apt-get install -y qemu-user-static binfmt-support)"
  [ "$(id -u)" = 0 ] || no_handler "registering one needs root (sudo $0 --register)"
  if [ ! -e "$BINFMT/register" ]; then
    mount -t binfmt_misc binfmt_misc "$BINFMT" 2>"/tmp/arm64-image.mount.$$" || {
      why=$(tr '\n' ' ' < "/tmp/arm64-image.mount.$$"); rm -f "/tmp/arm64-image.mount.$$"
      no_handler "cannot mount binfmt_misc on $BINFMT (${why% }: a container without the rights to, or a kernel without binfmt_misc)"
    }
    rm -f "/tmp/arm64-image.mount.$$"
    echo "arm64-image: mounted binfmt_misc on $BINFMT"
  fi
  if [ -e "$HANDLER" ]; then
    echo 1 > "$HANDLER"  # registered, but disabled
  elif ! { command -v update-binfmts >/dev/null && update-binfmts --enable qemu-aarch64 2>/dev/null; }; then
    [ -r "$CONF" ] || no_handler "update-binfmts could not enable qemu-aarch64 and $CONF is missing"
    tr -d '\n' < "$CONF" > "$BINFMT/register" 2>/dev/null || no_handler "the kernel refused the registration in $CONF"
  fi
  grep -qs '^enabled' "$HANDLER" || no_handler "qemu-aarch64 was registered, but the kernel shows it disabled"
  echo "arm64-image: registered qemu-aarch64 ($(sed -n 's/^interpreter //p' "$HANDLER"), flags: $(sed -n 's/^flags: //p' "$HANDLER"))"
}
register
[ "${1:-}" != --register ] || exit 0
[ "${1:-}" = --relabel ] || ! docker image inspect "$IMAGE" >/dev/null 2>&1 || exit 0
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
# Only debootstrap's first stage (download, unpack the required packages: no emulation), then the
# files of every package it fetched unpacked on the host: its second stage would run each
# package's maintainer scripts under qemu, 5 to 11 minutes on 2 cores (docs/measured.md), for a
# package database and caches the tests never read. What they run (sh, uname, find, python3, xz)
# is all there; /etc/passwd and /etc/group are base-passwd's own masters.
debootstrap --foreign --arch=arm64 --variant=minbase --include=python3,xz-utils bookworm "$root" \
  >"$tmp/debootstrap.log" 2>&1 || { tail -20 "$tmp/debootstrap.log" >&2; exit 1; }
for deb in "$root/var/cache/apt/archives/"*.deb; do dpkg-deb -x "$deb" "$root"; done
for f in passwd group; do [ -e "$root/etc/$f" ] || cp "$root/usr/share/base-passwd/$f.master" "$root/etc/$f"; done
rm -rf "$root/debootstrap" "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"*
# shellcheck disable=SC2086
get "$tmp/deps" linux/arm64 $DEPS
"$PY" - "$tmp/deps" "$root/opt/harness-deps" <<'EOF'
import pathlib, sys, zipfile
for w in sorted(pathlib.Path(sys.argv[1]).glob("*.whl")):
    zipfile.ZipFile(w).extractall(sys.argv[2])
EOF
get "$root/opt/wheels/arm64" linux/arm64 markupsafe==3.0.3
# The byte code Debian's postinst (py3compile) would have written, and the deps' own: every
# emulated start would otherwise compile each module it imports again, under qemu. Byte code
# is the same on every CPU; written here by a host Python of the image's version, else left out.
image_py=$(basename "$(readlink -f "$root/usr/bin/python3")")
if [ "$("$PY" -c 'import sys; print("python%d.%d" % sys.version_info[:2])')" = "$image_py" ]; then
  "$PY" -m compileall -q -j 0 -s "$root" -p / "$root/usr/lib/$image_py" "$root/opt/harness-deps" >/dev/null || true
fi
get "$root/opt/wheels/amd64" linux/amd64 markupsafe==3.0.3
[ "$(chroot "$root" uname -m)" = aarch64 ]  # emulated, through the kernel's handler
chroot "$root" /usr/bin/python3 -c 'import json, ssl, zipfile'  # the interpreter the tests run
tar -C "$root" -c . > "$tmp/layer.tar"
load_arm64 "$tmp/layer.tar"
echo "arm64-image: $IMAGE ($(docker image inspect -f '{{.Os}}/{{.Architecture}}' "$IMAGE"), $(( $(date +%s) - start )) s)"
