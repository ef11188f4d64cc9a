#!/usr/bin/env bash
# Everything a source-build visit to a host with no network, no Docker and no package index needs
# (an air-gapped H200 VM: at most 64 MiB per command, the ~11 MB checkout included), made here,
# one folder per command:
#   OUT/p1/  kit/docker-kit.tar.xz (tools/make-docker-kit.sh) + hwhl/ (the harness's own
#            dependencies that host lacks, cp312 wheels)                             ~48 MB
#   OUT/p2/  src/: the vLLM and FlashInfer sdists and the pinned sources vLLM's CMake
#            would fetch (`harness sources fetch --out`)                             ~47 MB
#   OUT/p3/  deps/: the dependency bundle (bundles/vllm-0.25.1-h200-deps.toml), w/: the
#            small part and bundle.json of the wheel bundle (bundles/vllm-0.25.1-h200.toml),
#            and ccache/: ccache for a base without it (tools/ccache-kit.sh)             ~39 MB
#   OUT/w1/ OUT/w2/ OUT/w3/  w/: the wheel bundle's two 60 MB parts in pieces that fit a
#            command (`cat part_00.piece_* > part_00` there), for the wheel examples   ~43, 43, 29 MB
# usage: tools/device-inputs.sh [--platform P] OUT [MATRIX]   (default matrix/h200-source.toml)
# Each folder goes with one command of examples/h200-source/device.sh (DEV=that folder).
# --platform (or PLATFORM=): the device's CPU, linux/amd64 or linux/arm64; default: this host's.
# The wheels are downloaded for it; the bundles' specs name their own (the H200 machine's:
# linux/amd64), and a --platform that contradicts one stops `harness bundle make`, named. The
# Docker kit is made from this machine's packages, so it is for this host's CPU only: another
# platform stops before anything is downloaded (make the kit on a machine of that CPU).
set -euo pipefail
if [ "${1:-}" = --platform ]; then PLATFORM=${2:?--platform needs a value}; shift 2; fi
out=$(realpath -m "${1:?usage: device-inputs.sh [--platform P] OUT [MATRIX]}"); matrix=${2:-matrix/h200-source.toml}
cd "$(dirname "$0")/.."
PY=${PY:-python3}
# the platform in the harness's words (harness/platforms.py): its docker name, the host's, its wheel tags
words=$("$PY" -c 'import sys
from harness import platforms
from harness.errors import ConfigError
try:
    p = platforms.parse(sys.argv[1], where="PLATFORM") if sys.argv[1] else platforms.host()
except ConfigError as e:
    sys.exit(f"device-inputs: {e}")
print(p.docker, platforms.host().docker, " ".join("--platform " + t for t in p.wheel_tags()))' "${PLATFORM:-}") || exit 2
read -r platform host_platform tags <<<"$words"
[ -f "$out/p1/kit/docker-kit.tar.xz" ] || [ "$platform" = "$host_platform" ] || {
  echo "device-inputs: the Docker kit is made from this host's packages ($host_platform), not $platform:" \
       "run tools/make-docker-kit.sh on a $platform machine into $out/p1/kit first" >&2; exit 2; }
# the harness's runtime dependencies the host's Python 3.12 lacks (it has rich, requests, urllib3,
# matplotlib, uvloop, nvidia-ml-py, typing-extensions); versions as installed here
HWHL="docker==7.2.0 tenacity==9.2.1 pydantic==2.14.4 pydantic_core==2.50.5 annotated_types==0.8.0 \
typing_inspection==0.4.5 tomli_w==1.2.0 isal==1.9.1"
mkdir -p "$out"/p1/kit "$out"/p1/hwhl "$out"/p2/src "$out"/p3/w "$out"/w1/w "$out"/w2/w "$out"/w3/w
[ -f "$out/p1/kit/docker-kit.tar.xz" ] || bash tools/make-docker-kit.sh "$out/p1/kit" >/dev/null
# shellcheck disable=SC2086
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  $tags -d "$out/p1/hwhl" $HWHL
harness() { "$PY" -m harness "$@"; }
harness sources fetch -m "$matrix" --out "$out/p2/src"
# ccache for a base without it: Debian's, for this host's CPU only (apt-get download)
[ -f "$out/p3/ccache/SHA256SUMS" ] || [ "$platform" != "$host_platform" ] || bash tools/ccache-kit.sh make "$out/p3/ccache"
[ -f "$out/p3/deps/part_00" ] || harness bundle make bundles/vllm-0.25.1-h200-deps.toml --out "$out/p3/deps" \
  --platform "$platform"
wb="$out/wheel-bundle"
[ -f "$wb/bundle.json" ] || harness bundle make bundles/vllm-0.25.1-h200.toml --out "$wb" --platform "$platform"
cp "$wb/part_02" "$wb/bundle.json" "$out/p3/w/"
for n in 00 01; do  # 45 MB + 15 MB pieces of each 60 MB part
  split -b 45000000 -a 1 "$wb/part_$n" "$out/w3/w/part_$n.piece_"
  mv "$out/w3/w/part_$n.piece_a" "$out/w$((10#$n + 1))/w/"
done
du -sh "$out"/p1 "$out"/p2 "$out"/p3 "$out"/w1 "$out"/w2 "$out"/w3
