"""Replay's frames laid out by ranges of ``_seq`` (``writer.sources.SeqRanges``): same rows, in input order.

``writer.replay`` gives its ``PointInTime`` the input's size, so the
stage-0 features carry the range key ``_p`` and every value frame is
partitioned by it and sorted by ``_seq``; the training set is their join,
written without another exchange. These tests hold that path to the one
without the layout (``seq_total=None``: plain joins on ``_seq``, then
``in_seq_order``), on an input of several files (several input
partitions), two event types, ``_id`` on some events (one more join), an
aggregate over an aggregate (a second dependency stage, a second value
frame) and events arriving late, and check that every dataset's rows come
out in ``_seq`` order, part file after part file (SPEC §5.8, §6).
"""

from __future__ import annotations

import random

import orjson
import pyarrow.parquet as pq
import pytest

from compiler import compile_sources
from writer import replay as replay_mod
from writer.pointintime import PointInTime
from writer.replay import run_replay
from writer.session import spark_conf
from writer.sources import SeqRanges, seq_join_keys, seq_ranges

TOPOLOGY = """
event pay
user := $.user as string
amount := $.amount as float?
n := Count(by user last 1 hour)
total := Sum(amount by user last 1 day)
everyone := Count(last 1 minute)
tier := n > 2
by_tier := Count(by tier last 10 minutes)
prev := Latest(amount by user exclusive)

event probe
user := $.user as string
n_pay := Count<pay>(by user last 1 hour)
"""

T0 = 1_357_035_420_000


def _events(n: int, seed: int) -> list[dict]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        t = T0 + i * 7_000 - (rng.randrange(600_000) if rng.random() < 0.2 else 0)  # a fifth up to 10 min late
        e = {"_type": "pay" if rng.random() < 0.8 else "probe", "_time": t, "user": f"u{rng.randrange(25)}"}
        if e["_type"] == "pay":
            e["amount"] = round(rng.uniform(1, 300), 2)
            if rng.random() < 0.3:
                e["_id"] = f"id{rng.randrange(n)}"  # some repeated: answered, not written
        out.append(e)
    return out


def _read_in_file_order(path) -> list[dict]:
    rows = []
    for part in sorted(path.glob("part-*.parquet")):
        rows += pq.read_table(part).to_pylist()
    return rows


@pytest.mark.parametrize("parts", [3, 8])
def test_laid_out_replay_equals_plain_joins_in_seq_order(spark, tmp_path, monkeypatch, parts):
    result = compile_sources({"t.scowl": TOPOLOGY})
    assert result.plan is not None, result.render()
    plan = result.plan
    events = _events(1500, seed=parts)
    inputs = tmp_path / "in"
    inputs.mkdir()
    for j in range(3):  # three files: three input partitions at least
        chunk = events[j * 500:(j + 1) * 500]
        (inputs / f"{j}.jsonl").write_bytes(b"\n".join(orjson.dumps(e) for e in chunk) + b"\n")

    with spark_conf(spark, "spark.sql.shuffle.partitions", str(parts)):
        laid_out = run_replay(spark, plan, [inputs], tmp_path / "laid_out")
        # the same replay with plain joins on _seq (no range layout)
        monkeypatch.setattr(replay_mod, "PointInTime",
                            lambda events, plan, seq_total=None: PointInTime(events, plan))
        plain = run_replay(spark, plan, [inputs], tmp_path / "plain")
    assert laid_out.rows == plain.rows and sum(laid_out.rows.values()) == len(events)
    for ev in ("pay", "probe"):
        got = _read_in_file_order(tmp_path / "laid_out" / ev)
        want = _read_in_file_order(tmp_path / "plain" / ev)
        assert [r["_seq"] for r in got] == sorted(r["_seq"] for r in got)  # input order, file after file
        assert got == want
    pay = {r["_seq"]: r for r in _read_in_file_order(tmp_path / "laid_out" / "pay")}
    assert any(r["_id"] is not None for r in pay.values()) and any(r["by_tier"] for r in pay.values())


def test_seq_ranges_join_without_losing_rows(spark):
    """Two frames laid out by :class:`SeqRanges` join on :func:`seq_join_keys` as a plain join on ``_seq`` does."""
    from pyspark.sql import functions as F

    from writer.session import co_partitioned

    ranges = seq_ranges(spark, 1000)
    assert isinstance(ranges, SeqRanges) and len(ranges.keys) == ranges.parts
    left = spark.createDataFrame([(s, f"l{s}") for s in range(0, 1000, 2)], "_seq long, l string").repartition(3)
    right = spark.createDataFrame([(s, s * 10) for s in range(0, 1000, 3)], "_seq long, r long").repartition(5)
    a, b = ranges.layout(left), ranges.layout(right)
    assert seq_join_keys(a, b) == ["_seq", "_p"] and seq_join_keys(left, b) == ["_seq"]
    with co_partitioned(spark):
        rows = a.join(b, seq_join_keys(a, b), "left").select("_seq", "l", "r", F.spark_partition_id().alias("p")).collect()
    assert [r["_seq"] for r in rows] == list(range(0, 1000, 2))  # in order, partition after partition
    assert all(r["l"] == f"l{r['_seq']}" and r["r"] == (r["_seq"] * 10 if r["_seq"] % 3 == 0 else None) for r in rows)
    assert all(r["p"] == min(r["_seq"] * ranges.parts // 1000, ranges.parts - 1) for r in rows)
