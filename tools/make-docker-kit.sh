#!/usr/bin/env bash
# Pack a Docker engine for a host with neither Docker nor a package index (an air-gapped H200 test
# machine): Debian's dockerd, docker CLI, containerd, the runc shim, runc, docker-init, and the
# shared libraries dockerd needs, from this machine's Debian packages (apt-get download; nothing
# is installed here). Output: OUTDIR/docker-kit.tar.xz (~47 MB) and its sha256 beside it.
# The kit is for this machine's CPU (Debian's packages and libraries for its architecture: amd64
# or arm64), recorded in the kit as MACHINE (uname -m); tools/device-docker-up.sh refuses a kit
# made for another CPU. For another host's CPU, run it on a machine of that CPU.
# On the host: tools/device-docker-up.sh OUTDIR/docker-kit.tar.xz
# usage: tools/make-docker-kit.sh OUTDIR
set -euo pipefail
out=$(realpath -m "${1:?usage: make-docker-kit.sh OUTDIR}"); mkdir -p "$out"
# Debian's multiarch folder for this CPU (/lib/x86_64-linux-gnu, /lib/aarch64-linux-gnu)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || true)
[ -n "$multiarch" ] || multiarch="$(uname -m)-linux-gnu"  # Debian's triplet for both CPUs it packs
[ -d "/lib/$multiarch" ] || [ -d "/usr/lib/$multiarch" ] || {
  echo "make-docker-kit: no /lib/$multiarch here: this needs a Debian or Ubuntu host (multiarch library folders)" >&2; exit 3; }
for tool in apt-get dpkg dpkg-deb xz sha256sum; do
  command -v "$tool" >/dev/null || { echo "make-docker-kit: needs $tool (Debian: apt, dpkg, xz-utils, coreutils)" >&2; exit 3; }
done
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT; cd "$w"
apt-get update -qq >/dev/null
# the libraries' packages too (Debian bookworm's names), so that a host without them installed
# (a minimal root) can make the kit
libpkgs="libsystemd0 libdevmapper1.02.1 libcap2 libgcrypt20 liblzma5 libzstd1 liblz4-1 libselinux1 libudev1
         libgpg-error0 libpcre2-8-0 libseccomp2"
# shellcheck disable=SC2086
apt-get download docker.io containerd runc tini $libpkgs >/dev/null 2>&1 \
  || { echo "apt-get download failed: docker.io containerd runc tini $libpkgs" >&2; exit 1; }
for f in *.deb; do dpkg -x "$f" x; done
mkdir -p pk/bin pk/lib
cp x/usr/sbin/dockerd x/usr/bin/docker x/usr/bin/containerd x/usr/bin/containerd-shim-runc-v2 \
   x/usr/sbin/runc x/usr/bin/docker-init pk/bin/
# the libraries dockerd/containerd/runc link against that a bare Ubuntu may lack
for l in libsystemd.so.0 libdevmapper.so.1.02.1 libcap.so.2 libgcrypt.so.20 liblzma.so.5 \
         libzstd.so.1 liblz4.so.1 libselinux.so.1 libudev.so.1 libgpg-error.so.0 \
         libpcre2-8.so.0 libseccomp.so.2; do
  found=""
  for d in "x/lib/$multiarch" "x/usr/lib/$multiarch" "/lib/$multiarch" "/usr/lib/$multiarch"; do
    [ -e "$d/$l" ] && { found="$d/$l"; break; }
  done
  [ -n "$found" ] || { echo "make-docker-kit: $l is in none of the downloaded packages ($libpkgs)" \
                            "nor in /lib/$multiarch: this Debian release names its package otherwise" >&2; exit 3; }
  cp -L "$found" pk/lib/
done
dpkg-deb -f "$(ls docker.io_*.deb)" Version > pk/VERSION
uname -m > pk/MACHINE
tar -C pk -cJf "$out/docker-kit.tar.xz" .
(cd "$out" && sha256sum docker-kit.tar.xz > docker-kit.tar.xz.sha256)
ls -la "$out/docker-kit.tar.xz"; echo "docker.io $(cat pk/VERSION) for $(cat pk/MACHINE)"
