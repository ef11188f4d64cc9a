#!/usr/bin/env bash
# Make sure a Docker engine answers. On a machine without one (CI, a fresh build box without
# systemd) install Debian's docker.io and start dockerd in the background. Idempotent.
set -euo pipefail
DOCKER=/usr/bin/docker
[ -x "$DOCKER" ] || DOCKER=$(command -v docker || true)
if [ -n "$DOCKER" ] && "$DOCKER" info >/dev/null 2>&1; then
  echo "docker-up: engine already answers"; exit 0
fi
if ! command -v dockerd >/dev/null 2>&1; then
  if [ "$(id -u)" != 0 ] || ! command -v apt-get >/dev/null; then
    echo "docker-up: no Docker engine, and cannot install one here (need root + apt-get)." >&2
    echo "docker-up: install Docker Engine, start it, and run again." >&2
    exit 1
  fi
  echo "docker-up: installing docker.io from Debian"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq docker.io >/dev/null
fi
if ! pgrep -x dockerd >/dev/null; then
  echo "docker-up: starting dockerd (log: /tmp/dockerd.log)"
  # No systemd here: start it ourselves, detached from this shell.
  nohup dockerd >/tmp/dockerd.log 2>&1 &
fi
for _ in $(seq 1 60); do
  if /usr/bin/docker info >/dev/null 2>&1 || docker info >/dev/null 2>&1; then
    echo "docker-up: engine up ($(docker version --format '{{.Server.Version}}'))"; exit 0
  fi
  sleep 1
done
echo "docker-up: dockerd did not answer within 60 s; see /tmp/dockerd.log" >&2
tail -20 /tmp/dockerd.log >&2 || true
exit 1
