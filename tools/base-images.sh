#!/usr/bin/env bash
# Local base images for the Docker tests: no registry can be reached, so make them here.
#   harness-test/busybox:latest        busybox rootfs, < 1 s, 2 MB
#   harness-test/debian-python:bookworm  debootstrap minbase + python3, ~1-2 min
#   harness-test/ccache:bookworm         that + gcc and ccache from Debian (the compile cache's
#                                        tests), ~1 min
# Idempotent: an image that exists is kept. BUSYBOX_IMAGE / DEBIAN_IMAGE name them otherwise
# (to time a build from scratch without touching the images the tests use).
set -euo pipefail
BUSYBOX_IMAGE=${BUSYBOX_IMAGE:-harness-test/busybox:latest}
DEBIAN_IMAGE=${DEBIAN_IMAGE:-harness-test/debian-python:bookworm}
CCACHE_IMAGE=${CCACHE_IMAGE:-harness-test/ccache:bookworm}
have() { docker image inspect "$1" >/dev/null 2>&1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT  # every scratch tree lives under here

if ! have "$BUSYBOX_IMAGE"; then
  command -v busybox >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null; }
  root="$tmp/busybox"
  mkdir -p "$root/bin" "$root/tmp" "$root/etc"
  cp "$(command -v busybox)" "$root/bin/busybox"
  for applet in $("$root/bin/busybox" --list); do
    [ "$applet" = busybox ] || ln -sf busybox "$root/bin/$applet"
  done
  tar -C "$root" -c . | docker import --change 'ENV PATH=/bin' - "$BUSYBOX_IMAGE" >/dev/null
  echo "base-images: $BUSYBOX_IMAGE"
fi

if ! have "$DEBIAN_IMAGE"; then
  command -v debootstrap >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
  root="$tmp/debian"
  log="$tmp/debootstrap.log"
  debootstrap --variant=minbase --include=python3 bookworm "$root" >"$log" 2>&1 \
    || { tail -20 "$log" >&2; exit 1; }
  rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"*
  tar -C "$root" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    - "$DEBIAN_IMAGE" >/dev/null
  echo "base-images: $DEBIAN_IMAGE"
fi

if ! have "$CCACHE_IMAGE"; then
  mkdir -p "$tmp/ccache"
  printf '%s\n' "FROM $DEBIAN_IMAGE" \
    'RUN apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends gcc libc6-dev ccache >/dev/null && rm -rf /var/lib/apt/lists/*' \
    'LABEL harness.role=test-image harness.test=ccache-base' > "$tmp/ccache/Dockerfile"
  docker build -q -t "$CCACHE_IMAGE" "$tmp/ccache" >/dev/null
  echo "base-images: $CCACHE_IMAGE"
fi
