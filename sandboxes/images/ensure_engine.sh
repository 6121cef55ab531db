#!/usr/bin/env bash
# Make sure a Docker engine answers. On a Debian host where we are root, install docker.io and start
# dockerd when needed; anywhere else, say exactly what the user must do and fail.
set -euo pipefail

engine_answers() { docker info >/dev/null 2>&1; }

if command -v docker >/dev/null 2>&1 && engine_answers; then
  echo "docker: engine answers ($(docker version --format '{{.Server.Version}}' 2>/dev/null))"
  exit 0
fi

if [[ $(id -u) -ne 0 || ! -f /etc/debian_version ]]; then
  cat >&2 <<'MSG'
docker: no Docker engine answers, and this is not a Debian host where we are root.
Install Docker Engine (https://docs.docker.com/engine/install/), start it, and make sure this user can
reach it (`docker info` must succeed, e.g. add the user to the `docker` group), then re-run.
The sandboxes also need `iptables` on the host and root (or CAP_NET_ADMIN) to confine the network.
MSG
  exit 1
fi

if ! command -v dockerd >/dev/null 2>&1 || ! command -v iptables >/dev/null 2>&1 || ! command -v debootstrap >/dev/null 2>&1; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -q
  apt-get install -y -q --no-install-recommends docker.io iptables debootstrap ca-certificates >/dev/null
fi

if ! pgrep -x dockerd >/dev/null 2>&1; then
  mkdir -p /var/log
  # A dockerd that was killed leaves its pid file, and a new one refuses to start while it is there.
  rm -f /var/run/docker.pid
  # No systemd in containers/CI machines: start the daemon directly and leave it running.
  nohup dockerd >/var/log/dockerd.log 2>&1 &
fi

for _ in $(seq 1 60); do
  if engine_answers; then
    echo "docker: engine started ($(docker version --format '{{.Server.Version}}' 2>/dev/null))"
    exit 0
  fi
  sleep 1
done
echo "docker: dockerd did not answer within 60 s; see /var/log/dockerd.log" >&2
tail -n 20 /var/log/dockerd.log >&2 || true
exit 1
