"""Backfill of aggregates over aggregates (dependency stages) + online equals online-only (SPEC §2.4, §5.6).

Like ``test_backfill_online``, but the states' keys, values and filters are
themselves aggregates (``worst`` is the ``Max`` of ``n_ip`` values, ``seq``
a ``Sequence`` of ``worst`` values, ...). A generated timeline is processed
twice on fresh stores: (a) every event through ``POST /batch``; (b) the
events before a split time by ``run_backfill``, the rest through the API.
The live responses must be equal (floats within 1e-9 relative).

The run window starts a day into the file and the split is just over a day
after the (widened) start: the first live reads of ``worst`` count writes
from the window's first hour, whose ``n_ip`` values need the events of the
hour before the window -- read from the input, not backfilled.

Runtime: ~30 s on 2 cores.
"""

from __future__ import annotations

import random

import orjson
import pytest
import redis

from compiler import compile_sources
from tests.e2e.helpers import close, post_all
from writer.backfill import run_backfill

TOPOLOGY = """
event login
user := $.user as string
ip := $.ip as string?
n_ip := Count(by ip last 1 hour)
busy := n_ip > 2
worst := Max(n_ip by user last 1 day)
n_busy := Count(by user where busy last 2 hours)
by_n := Count(by n_ip last 30 minutes)
last_n := Latest(n_ip, ip by user last 1 day exclusive)
first_worst := First(worst by ip last 3 hours)
uniq := CountUnique(n_ip by user last 6 hours)
seq := Sequence(worst by ip last 3 hours limit 3)
score := n_ip * 2
cross := Sum<login, purchase>(score by user last 1 day)

event purchase
user := $.user as string
total := $.total as int
n_p := Count(by user last 1 day)
score := n_p + total
top := Latest<login>(worst by user last 1 day)
"""

START_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
DAY_MS = 86_400_000
RUN_START_MS = START_MS + DAY_MS + 7 * 60_000  # widened down to START + 1 day (1-day tiles)
SPLIT_MS = START_MS + 2 * DAY_MS + 20 * 60_000 + 123  # < widened start + 1 day + 1 hour


def make_events(n: int = 1200, seed: int = 5) -> list[dict]:
    rng = random.Random(seed)
    users = [f"u{i}" for i in range(5)] + ["ü-ñ|{x}"]
    ips = ["10.0.0.1", "10.0.0.2", "10.0.0.3", None]
    t = START_MS
    out = []
    for _ in range(n):
        t += rng.choice([0, 0, 1, 1000, 60_000, 300_000, 840_000])
        if rng.random() < 0.8:
            out.append({"_type": "login", "_time": t, "user": rng.choice(users), "ip": rng.choice(ips)})
        else:
            out.append({"_type": "purchase", "_time": t, "user": rng.choice(users), "total": rng.randint(1, 10**12)})
    return out


@pytest.fixture(scope="module")
def plan():
    result = compile_sources({"t.scowl": TOPOLOGY})
    assert result.plan is not None, result.render()
    return result.plan


def test_staged_backfill_then_online_equals_online_only(spark, redis_url, plan, tmp_path):
    events = make_events()
    history = [e for e in events if e["_time"] < SPLIT_MS]
    live = [e for e in events if e["_time"] >= SPLIT_MS]
    assert len(history) > 800 and len(live) > 100

    online_only = post_all(plan, redis_url, events)[len(history):]

    redis.Redis.from_url(redis_url).flushall()
    path = tmp_path / "history.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in history) + b"\n")
    report = run_backfill(spark, plan, [path], redis_url, start_ms=RUN_START_MS, end_ms=SPLIT_MS)
    assert report.window == (START_MS + DAY_MS, SPLIT_MS)
    assert report.events == sum(1 for e in history if e["_time"] >= START_MS + DAY_MS)
    assert report.events < len(history)  # events before the window exist and are read for the stages

    mixed = post_all(plan, redis_url, live)
    assert len(mixed) == len(online_only)
    for i, (a, b) in enumerate(zip(online_only, mixed)):
        diffs = {k: (a[k], b[k]) for k in a if not close(a[k], b[k])}
        assert not diffs, f"live event {i} ({live[i]}): {diffs}"
    # the staged values are not trivial
    assert any((o.get("worst") or 0) > 3 for o in online_only)
    assert any(o.get("seq") and len(o["seq"]) == 3 for o in online_only)
