#!/usr/bin/env bash
# Local base images for the Docker tests: no registry can be reached, so make them here.
#   harness-test/busybox:latest        busybox rootfs, < 1 s, 2 MB
#   harness-test/debian-python:bookworm  debootstrap minbase + python3, ~1-2 min
# Idempotent: an image that exists is kept.
set -euo pipefail
have() { docker image inspect "$1" >/dev/null 2>&1; }

if ! have harness-test/busybox:latest; then
  command -v busybox >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq busybox-static >/dev/null; }
  root=$(mktemp -d); trap 'rm -rf "$root"' EXIT
  mkdir -p "$root/bin" "$root/tmp" "$root/etc"
  cp "$(command -v busybox)" "$root/bin/busybox"
  for applet in $("$root/bin/busybox" --list); do
    [ "$applet" = busybox ] || ln -sf busybox "$root/bin/$applet"
  done
  tar -C "$root" -c . | docker import --change 'ENV PATH=/bin' - harness-test/busybox:latest >/dev/null
  echo "base-images: harness-test/busybox:latest"
fi

if ! have harness-test/debian-python:bookworm; then
  command -v debootstrap >/dev/null || { apt-get update -qq; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
  root=$(mktemp -d)
  debootstrap --variant=minbase --include=python3 bookworm "$root" >/tmp/debootstrap.log 2>&1 \
    || { tail -20 /tmp/debootstrap.log >&2; exit 1; }
  rm -rf "$root/var/cache/apt/archives/"*.deb "$root/var/lib/apt/lists/"*
  tar -C "$root" -c . | docker import \
    --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    - harness-test/debian-python:bookworm >/dev/null
  rm -rf "$root"
  echo "base-images: harness-test/debian-python:bookworm"
fi
