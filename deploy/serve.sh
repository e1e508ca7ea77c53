#!/usr/bin/env bash
# Serve a topology directory with one worker process per core:
# `scowl serve --workers N` (N = $WORKERS, default $(nproc)), all workers over
# one store. Needs SCOWL_REDIS_URL: production uses a real Redis
# (deploy/redis.conf), not the embedded server. exec: a stop signal reaches
# scowl, which lets every worker finish its requests in flight first.
set -euo pipefail
TOPOLOGY="${1:?usage: serve.sh TOPOLOGY_DIR}"
: "${SCOWL_REDIS_URL:?set SCOWL_REDIS_URL}"
exec python -m scowl serve "$TOPOLOGY" --host 0.0.0.0 --port "${PORT:-8000}" --workers "${WORKERS:-$(nproc)}"
