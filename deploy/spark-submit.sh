#!/usr/bin/env bash
# Backfill on a Spark cluster: scowl drives the job from this machine (the
# driver); executors need Python with scowl installed (same image) and must
# reach SCOWL_REDIS_URL.
# usage: spark-submit.sh spark://master:7077 TOPOLOGY_DIR EVENTS_PATH [--start ISO --end ISO]
set -euo pipefail
MASTER="${1:?master URL}"
TOPOLOGY="${2:?topology dir}"
EVENTS="${3:?events path, glob or directory}"
shift 3
: "${SCOWL_REDIS_URL:?set SCOWL_REDIS_URL}"
exec scowl backfill "$TOPOLOGY" --master "$MASTER" --events "$EVENTS" "$@"
