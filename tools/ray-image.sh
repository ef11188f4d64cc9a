#!/usr/bin/env bash
# harness-test/ray:<version>: the stand-in base image (harness-test/debian-python:bookworm, made
# by tools/base-images.sh) plus the real `ray` wheel and its dependencies from PyPI, CPU-only:
# the multi-node tests form a Ray cluster from containers of it, GPUs declared as resources.
#   RAY_VERSION (default 2.60.0), PYTHON (an interpreter with pip; default python3),
#   RAY_IMAGE_TAG (default harness-test/ray:$RAY_VERSION, the tag the tests use; another one
#   times a build without touching theirs)
# Idempotent: an image that exists is kept. Needs PyPI and a Docker engine.
set -euo pipefail
VER=${RAY_VERSION:-2.60.0}
TAG=${RAY_IMAGE_TAG:-harness-test/ray:$VER}
PY=${PYTHON:-python3}
if docker image inspect "$TAG" >/dev/null 2>&1; then echo "ray-image: $TAG exists"; exit 0; fi
docker image inspect harness-test/debian-python:bookworm >/dev/null 2>&1 \
  || { echo "ray-image: run tools/base-images.sh first" >&2; exit 1; }
arch=$(uname -m)
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
# the image's python is Debian bookworm's 3.11: wheels for cp311 on this machine's arch
"$PY" -m pip install --quiet --target "$tmp/site" --only-binary=:all: --python-version 3.11 \
  --platform "manylinux2014_$arch" --platform "manylinux_2_17_$arch" --platform "manylinux_2_28_$arch" \
  "ray==$VER"
cat > "$tmp/Dockerfile" <<DOCKERFILE
FROM harness-test/debian-python:bookworm
COPY site /opt/ray-site
ENV PYTHONPATH=/opt/ray-site
LABEL harness.test=ray harness.ray-version=$VER
DOCKERFILE
docker build -q -t "$TAG" "$tmp" >/dev/null
echo "ray-image: $TAG"
