#!/usr/bin/env bash
# Serve a topology directory with one uvicorn worker per core.
# Needs SCOWL_REDIS_URL (a shared store: several workers must not each start
# an embedded server).
set -euo pipefail
TOPOLOGY="${1:?usage: serve.sh TOPOLOGY_DIR}"
: "${SCOWL_REDIS_URL:?set SCOWL_REDIS_URL}"
export SCOWL_TOPOLOGY="$TOPOLOGY"
exec python -m uvicorn --factory serving.app:create_app_from_env --host 0.0.0.0 --port "${PORT:-8000}" \
    --workers "${WORKERS:-$(nproc)}" --no-access-log --log-level warning
