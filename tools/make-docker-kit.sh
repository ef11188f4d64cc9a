#!/usr/bin/env bash
# Pack a Docker engine for a host with neither Docker nor a package index (the H200 test
# machine): Debian's dockerd, docker CLI, containerd, the runc shim, runc, docker-init, and the
# shared libraries dockerd needs, from this machine's Debian packages (apt-get download; nothing
# is installed here). Output: OUTDIR/docker-kit.tar.xz (~47 MB) and its sha256 beside it.
# On the host: tools/device-docker-up.sh OUTDIR/docker-kit.tar.xz
# usage: tools/make-docker-kit.sh OUTDIR
set -euo pipefail
out=$(realpath -m "${1:?usage: make-docker-kit.sh OUTDIR}"); mkdir -p "$out"
w=$(mktemp -d); trap 'rm -rf "$w"' EXIT; cd "$w"
apt-get update -qq >/dev/null
apt-get download docker.io containerd runc tini >/dev/null 2>&1 || { echo "apt-get download failed" >&2; exit 1; }
for f in *.deb; do dpkg -x "$f" x; done
mkdir -p pk/bin pk/lib
cp x/usr/sbin/dockerd x/usr/bin/docker x/usr/bin/containerd x/usr/bin/containerd-shim-runc-v2 \
   x/usr/sbin/runc x/usr/bin/docker-init pk/bin/
# the libraries dockerd/containerd/runc link against that a bare Ubuntu may lack
for l in libsystemd.so.0 libdevmapper.so.1.02.1 libcap.so.2 libgcrypt.so.20 liblzma.so.5 \
         libzstd.so.1 liblz4.so.1 libselinux.so.1 libudev.so.1 libgpg-error.so.0 \
         libpcre2-8.so.0 libseccomp.so.2; do
  cp -L "/lib/x86_64-linux-gnu/$l" pk/lib/ 2>/dev/null || cp -L "/usr/lib/x86_64-linux-gnu/$l" pk/lib/
done
dpkg-deb -f "$(ls docker.io_*.deb)" Version > pk/VERSION
tar -C pk -cJf "$out/docker-kit.tar.xz" .
(cd "$out" && sha256sum docker-kit.tar.xz > docker-kit.tar.xz.sha256)
ls -la "$out/docker-kit.tar.xz"; cat pk/VERSION
