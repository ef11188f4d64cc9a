#!/usr/bin/env bash
# Make a local image say the CPU its files are for. An engine older than API 1.43 (Debian's
# docker.io 20.10) ignores `docker import --platform` and calls every imported image amd64; a
# build for linux/arm64 on such an image then looks for that variant in a registry. This saves
# the image, sets `architecture` in its config (files, ENV and LABELs as they were) and loads it
# again under the same tag. An image that already says ARCH is left as it is.
# usage: tools/relabel-image.sh IMAGE ARCH      (ARCH: arm64 or amd64; PYTHON: a Python 3)
set -euo pipefail
image=${1:?usage: relabel-image.sh IMAGE ARCH}; arch=${2:?usage: relabel-image.sh IMAGE ARCH}
case "$arch" in arm64|amd64) ;; *) echo "relabel-image: ARCH must be arm64 or amd64, not $arch" >&2; exit 2 ;; esac
[ "$(docker image inspect -f '{{.Architecture}}' "$image")" = "$arch" ] && exit 0
docker save "$image" | "${PYTHON:-python3}" -c '
import io, json, sys, tarfile
arch = sys.argv[1]
src = tarfile.open(fileobj=sys.stdin.buffer, mode="r|")
out = tarfile.open(fileobj=sys.stdout.buffer, mode="w|")
for m in src:
    data = src.extractfile(m).read() if m.isfile() else None
    if data is not None and m.name.endswith(".json") and m.name != "manifest.json" and b"architecture" in data:
        cfg = json.loads(data)
        cfg["architecture"] = arch
        data = json.dumps(cfg).encode()
        m.size = len(data)
    out.addfile(m, io.BytesIO(data) if data is not None else None)
out.close()' "$arch" | docker load >/dev/null
[ "$(docker image inspect -f '{{.Architecture}}' "$image")" = "$arch" ] \
  || { echo "relabel-image: $image still does not say $arch" >&2; exit 1; }
