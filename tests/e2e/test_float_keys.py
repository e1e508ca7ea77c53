"""Float values as keys and distinct values across engines (SPEC §3.5, §5.5).

A float component of an entity key, a ``CountUnique`` value or a
HyperLogLog item is stored as its encoding (``compiler.algebra.keys``:
Python's ``repr``, ``-0.0`` as ``0.0``). Backfill and stream write it with
the Spark twin (``compiler.algebra.spark.encode_component_column``), online
reads it with Python's. Regression: the twin printed ``1.5E7`` where Python
prints ``15000000.0``, so after a backfill an online ``CountUnique`` of
amounts of ten million and more counted each amount twice, and a state keyed
by such an amount started empty online.

For a seeded timeline of amounts in every notation range (fixed, ``>= 1e7``,
``< 1e-3``, ``-0.0`` beside ``0.0``): replay, backfill then online, and
stream then online equal :mod:`tests.reference`.
"""

from __future__ import annotations

import random

import orjson
import pyarrow.parquet as pq
import pytest

from tests.e2e.helpers import assert_values_equal, post_all, stream_chunks
from tests.reference import reference_values
from tests.serving.helpers import compile_text
from writer.backfill import run_backfill
from writer.replay import run_replay

pytestmark = pytest.mark.slow

TOPOLOGY = """\
event pay
user := $.user as string
amount := $.amount as float
distinct_amounts := CountUnique(amount by user last 1 day)
approx_amounts := HyperLogLog(amount by user last 1 day)
same_amount := Count(by amount last 1 day)
same_amount_users := CountUnique(user by amount)
"""

AMOUNTS = [15_000_000.0, 25_000_000.0, 1e7, 123_456_789.125, 2.5, 0.1, 1e-5, 2.5e-4, 0.0, -0.0, 1e16, 9_999_999.5]
START_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
SPLIT_MS = START_MS + 7 * 3_600_000 + 777  # about half of the ~14 hours


def _events(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    t, out = START_MS, []
    for _ in range(n):
        t += rng.randint(0, 200_000)
        out.append({"_type": "pay", "_time": t, "user": rng.choice("abc"), "amount": rng.choice(AMOUNTS)})
    return out


@pytest.fixture(scope="module")
def plan():
    return compile_text(TOPOLOGY)


@pytest.fixture(scope="module")
def events():
    return _events(500, 3)


@pytest.fixture(scope="module")
def expected(plan, events):
    want = reference_values(plan, events)
    assert max(w["distinct_amounts"] for w in want) >= 8  # many amounts per user and day
    assert max(w["same_amount_users"] for w in want) == 3
    return want


def _history(events: list[dict]) -> list[dict]:
    history = [e for e in events if e["_time"] < SPLIT_MS]
    assert 150 < len(history) < len(events) - 150
    return history


def test_online_equals_reference(plan, events, expected, redis_url):
    assert_values_equal(post_all(plan, redis_url, events), expected, "online")


def test_replay_equals_reference(spark, plan, events, expected, tmp_path):
    path = tmp_path / "events.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in events) + b"\n")
    run_replay(spark, plan, [path], tmp_path / "out")
    rows = sorted(pq.read_table(tmp_path / "out" / "pay").to_pylist(), key=lambda r: r["_seq"])
    assert_values_equal(rows, expected, "replay")


def test_backfill_then_online_equals_reference(spark, plan, events, expected, redis_url, tmp_path):
    history = _history(events)
    path = tmp_path / "history.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in history) + b"\n")
    run_backfill(spark, plan, [path], redis_url, start_ms=START_MS, end_ms=SPLIT_MS)
    live = post_all(plan, redis_url, events[len(history):])
    assert_values_equal(live, expected[len(history):], "backfill then online")


def test_stream_then_online_equals_reference(spark, plan, events, expected, redis_url, tmp_path):
    history = _history(events)
    report = stream_chunks(spark, plan, redis_url, [history], tmp_path)
    assert report.totals["events"] == len(history)
    live = post_all(plan, redis_url, events[len(history):])
    assert_values_equal(live, expected[len(history):], "stream then online")
