"""Int ``Sum`` totals beyond 64 bits on every engine (SPEC §3.5: "int results are exact 64-bit integers").

A window's exact total may leave int64 and come back (``2**62 + 2**62 -
2**62``). Every engine keeps each tile's exact total (``common.lua``
``int_add_text``, ``compiler.algebra.spark.exact_long_sum``,
``compiler.algebra.arrowtiles.exact_int_sums``) and a read whose total lies
outside int64 is null; online it also reports ``integer overflow`` in
``errors``. Before, the store's ``HINCRBY`` failed mid-script: the event was
answered 503 ``store-unavailable`` after some of its writes had been made
(a ``Count`` of the same event counted it), backfill's ``sum`` of ``long``
failed the job under ANSI, and the stream's NumPy sums wrapped silently.

For a seeded timeline whose values are often near ``±2**62``:

* online (``POST /batch``): every event answered, the values of
  :mod:`tests.reference` (null beyond int64), the error exactly where a sum
  is null, ``Count`` counting every event (no partial write);
* replay: the same values;
* backfill of the first part, then online: the same values for the rest;
* stream over the first part, then online: the same values for the rest.
"""

from __future__ import annotations

import random

import orjson
import pyarrow.parquet as pq
import pytest
from fastapi.testclient import TestClient

from serving.app import create_app
from serving.settings import Settings
from tests.e2e.helpers import assert_values_equal, post_all, stream_chunks
from tests.reference import reference_values
from tests.serving.helpers import compile_text
from writer.backfill import run_backfill
from writer.replay import run_replay

pytestmark = pytest.mark.slow

TOPOLOGY = """\
event e
k := $.k as string
v := $.v as int
s_1h := Sum(v by k last 1 hour)
s_all := Sum(v by k)
s_day := Sum(v last 1 day)
s_lim := Sum(v by k limit 3)
s_ex := Sum(v by k last 10 minutes exclusive)
s_pos := Sum(v by k where v > 0 last 6 hours)
n := Count(by k)
"""

SUMS = ["s_1h", "s_all", "s_day", "s_lim", "s_ex", "s_pos"]
START_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
SPLIT_MS = START_MS + 20 * 3_600_000 + 1_234  # not on a tile boundary


def _events(n: int, seed: int) -> list[dict]:
    """``n`` events over ~1.6 days (200 s apart on average), four keys; a third of the values near ±2**62, some at the int64 limits."""
    rng = random.Random(seed)
    t = START_MS
    out = []
    for _ in range(n):
        t += rng.randint(0, 400_000)
        k = rng.random()
        if k < 0.6:
            v = rng.randint(-1000, 1000)
        elif k < 0.95:
            v = rng.choice([1, -1]) * (2**62 + rng.randint(0, 2**40))
        else:
            v = rng.choice([2**63 - 1, -(2**63)])
        out.append({"_type": "e", "_time": t, "k": rng.choice("abcd"), "v": v})
    return out


@pytest.fixture(scope="module")
def plan():
    return compile_text(TOPOLOGY)


@pytest.fixture(scope="module")
def events():
    return _events(700, 7)


@pytest.fixture(scope="module")
def expected(plan, events):
    return reference_values(plan, events)


def test_timeline_leaves_int64_and_comes_back(expected):
    for name in SUMS:
        values = [w[name] for w in expected]
        assert sum(v is None for v in values) >= 5, name
        assert sum(v is not None and abs(v) > 2**62 for v in values) >= 5, name
    # a sum that was null (beyond int64) becomes a value again in the same window
    s = [w["s_all"] for w in expected]
    assert any(a is None and b is not None for a, b in zip(s, s[1:]))


def test_online_answers_every_event_with_the_reference(plan, events, expected, redis_url):
    app = create_app(plan, Settings(), redis_url=redis_url)
    got, errors = [], []
    with TestClient(app) as c:
        for e in events:
            r = c.post("/event", json=e)
            assert r.status_code == 200, r.text
            body = r.json()
            got.append(body["features"])
            errors.append(body.get("errors", {}))
    assert_values_equal(got, expected, "online")
    counts: dict[str, int] = {}
    for e, g, err in zip(events, got, errors):
        counts[e["k"]] = counts.get(e["k"], 0) + 1
        assert g["n"] == counts[e["k"]]  # every write made, none twice
        assert err == {name: "integer overflow" for name in SUMS if g[name] is None}


def test_replay_equals_reference(spark, plan, events, expected, tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in events) + b"\n")
    run_replay(spark, plan, [path], tmp_path / "out")
    rows = sorted(pq.read_table(tmp_path / "out" / "e").to_pylist(), key=lambda r: r["_seq"])
    assert [r["_seq"] for r in rows] == list(range(len(events)))
    assert_values_equal(rows, expected, "replay")


def test_backfill_then_online_equals_reference(spark, plan, events, expected, redis_url, tmp_path):
    history = [e for e in events if e["_time"] < SPLIT_MS]
    assert 200 < len(history) < len(events) - 200
    path = tmp_path / "history.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in history) + b"\n")
    run_backfill(spark, plan, [path], redis_url, start_ms=START_MS, end_ms=SPLIT_MS)
    live = post_all(plan, redis_url, events[len(history):])
    assert_values_equal(live, expected[len(history):], "backfill then online")


def test_stream_then_online_equals_reference(spark, plan, events, expected, redis_url, tmp_path):
    history = [e for e in events if e["_time"] < SPLIT_MS]
    half = len(history) // 2
    report = stream_chunks(spark, plan, redis_url, [history[:half], history[half:]], tmp_path)
    assert report.totals["events"] == len(history) and report.late == 0
    live = post_all(plan, redis_url, events[len(history):])
    assert_values_equal(live, expected[len(history):], "stream then online")
