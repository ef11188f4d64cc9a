#!/usr/bin/env bash
# On the H200 test machine, after device-docker-up.sh: a base image from the machine's own
# root file system (Ubuntu 24.04; Python 3.12 and torch 2.11.0+cu130 in /opt/torch/.venv), the
# stand-in for a CUDA base image that no registry here can serve. The driver folder is left out
# (it is mounted read-only at run time: [host].driver_dirs). A wheel stack names it with
# base_image = { repository = "h200-root", tag = "local", local = true } and is pinned by its ID.
# usage: tools/device-base-image.sh [TAG]     (default h200-root:local)
set -euo pipefail
tag=${1:-h200-root:local}
docker image inspect "$tag" >/dev/null 2>&1 && { echo "$tag already there"; exit 0; }
tar -C / --exclude=./proc --exclude=./sys --exclude=./tmp --exclude=./dev --exclude=./run \
    --exclude=./usr/local/nvidia -c . 2>/dev/null | docker import \
    -c 'ENV PATH=/opt/torch/.venv/bin:/usr/local/nvidia/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    -c 'ENV LD_LIBRARY_PATH=/usr/local/nvidia/lib64:/usr/local/nvidia/lib' - "$tag" >/dev/null
docker image inspect -f "$tag {{.Id}} {{.Size}} bytes" "$tag"
