#!/usr/bin/env bash
# On a host with no Docker (an air-gapped H200 VM): unpack the kit from
# tools/make-docker-kit.sh and start dockerd detached (setsid), so it lives until the machine
# goes back. The VM has no iptables, so no bridge: --bridge=none --iptables=false; containers
# use the host network ([host].network = "host"). Idempotent.
# usage: source tools/device-docker-up.sh PATH/docker-kit.tar.xz  -> exports PATH, DOCKER_HOST
kit=${1:?usage: source tools/device-docker-up.sh PATH/docker-kit.tar.xz}
if [ ! -x /tmp/dk/bin/dockerd ]; then
  mkdir -p /tmp/dk && tar -C /tmp/dk -xJf "$kit" || { echo "cannot unpack $kit"; return 1 2>/dev/null || exit 1; }
fi
# a kit records the CPU it was made for (kits made before that did not: x86_64)
if [ "$(cat /tmp/dk/MACHINE 2>/dev/null || echo x86_64)" != "$(uname -m)" ]; then
  echo "$kit is for $(cat /tmp/dk/MACHINE 2>/dev/null || echo x86_64), this host is $(uname -m): make the kit" \
       "(tools/make-docker-kit.sh) on a $(uname -m) machine"
  rm -rf /tmp/dk; return 2 2>/dev/null || exit 2
fi
echo /tmp/dk/lib > /etc/ld.so.conf.d/zz-docker-kit.conf && ldconfig
export PATH=/tmp/dk/bin:$PATH DOCKER_HOST=unix:///tmp/docker.sock
if ! docker info >/dev/null 2>&1; then
  setsid dockerd --storage-driver=overlay2 --bridge=none --iptables=false --ip-forward=false \
    --ip-masq=false --data-root /tmp/docker-data --exec-root /tmp/docker-exec \
    -H "$DOCKER_HOST" >/tmp/dockerd.log 2>&1 < /dev/null &
  for _ in $(seq 120); do docker info >/dev/null 2>&1 && break; sleep 0.5; done
fi
docker info --format 'dockerd {{.ServerVersion}} storage {{.Driver}} runtimes {{json .Runtimes}}' \
  || { tail -20 /tmp/dockerd.log; return 1 2>/dev/null || exit 1; }
