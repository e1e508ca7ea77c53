"""The stream's one-frame features and writes equal the per-event-type frames' (SPEC §5.7, §5.10).

``writer.features.batch_features`` + ``writer.tilepass.batch_write_rows``
(every writer event type's features and writes in one frame: what
``scowl stream`` plans per micro-batch) must give exactly the write rows of
``writer.tiles.feature_frames`` + ``writer.tilepass.write_rows`` (a frame
per event type, unioned; what backfill-style callers and the Arrow pass
tests use), row for row, on:

* a topology of several writer event types whose features share names
  with different inputs, types and scalars (``carrier`` an int in one type,
  a string in another; a scalar of the same name and text over those),
  ``where`` filters, repeated ``_id`` s and invalid values;
* the every-function topology of ``tests/writer/test_pit_oracle.py``.
"""

from __future__ import annotations

import random
from collections import Counter

import orjson
import pytest
from pyspark.sql import functions as F

from compiler import compile_sources
from tests.writer.test_pit_oracle import TOPOLOGY, _timeline
from tests.writer.test_tilepass import EXTRA
from writer.features import StagedFeatureError, batch_features
from writer.session import without_codegen
from writer.sources import mark_repeated_ids, read_events, valid
from tests.writer.tile_oracle import write_rows
from writer.tilepass import batch_write_rows
from writer.tiles import feature_frames

MULTI = """
event dep
carrier := $.carrier as string
delay := $.delay as float?
origin := $.origin as string
key := carrier + "/" + origin
late := delay > 15.0
n_carrier := Count(by carrier last 1 hour)
late_key := Count(by key where late last 1 day)
avg_delay := Average(delay by carrier last 1 hour)
seq_key := Sequence(delay by key last 1 hour limit 3)

event arr
carrier := $.c as int?
key := $.dest as string
delay := $.delay as int?
late := delay > 30
n_arr := Count(by key where late last 1 hour)
max_c := Max(carrier by key last 1 day)
uniq := CountUnique(carrier by key last 1 day)

event plain
origin := $.origin as string
n_dep_origin := Count(by origin last 1 hour)
"""


def _multi_events(n: int, seed: int = 7) -> list[dict]:
    rng = random.Random(seed)
    out = []
    t = 1_700_000_000_000
    for i in range(n):
        t += rng.choice([0, 1, 1000, 60_000])
        kind = rng.choice(["dep", "arr", "plain", "other"])
        e: dict = {"_type": kind, "_time": t}
        if rng.random() < 0.2:
            e["_id"] = f"id{rng.randrange(n // 3)}"
        if kind == "dep":
            # keys to escape and keys over the 120-character bound (hashed), SPEC §5.5
            e.update(carrier=rng.choice(["AA", "B6", "", "ÄÖ", "a{b}%c|", "L" * 130]), origin=rng.choice(["EWR", "JFK"]),
                     delay=rng.choice([None, -3.5, 16.25, 40.0, "x"]))
        elif kind == "arr":
            e.update(c=rng.choice([1, 2, 3, None, "no", 2.5]), dest=rng.choice(["BOS", "SFO", None]),
                     delay=rng.choice([10, 45, None]))
        else:
            e.update(origin=rng.choice(["EWR", "LGA", 5]))
        out.append(e)
    return out


def _rows(df) -> Counter:
    return Counter(tuple(r) for r in df.collect())


@pytest.mark.parametrize("case", ["multi", "every-function"])
def test_batch_write_rows_equal_per_type_frames(spark, tmp_path, case):
    if case == "multi":
        plan = compile_sources({"t.scowl": MULTI}).plan
        events = _multi_events(1500)
    else:
        plan = compile_sources({"t.scowl": TOPOLOGY, "x.scowl": EXTRA}).plan
        events = _timeline(11, 600)
        assert any(e.get("x") == 2**62 for e in events)  # int Sum tiles past int64
    assert plan is not None
    path = tmp_path / "t.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in events) + b"\n")
    raw = read_events(spark, [path]).where(valid(list(plan.events)))
    if any("_id" in e for e in events):
        raw = mark_repeated_ids(raw)
    raw = raw.cache()
    states = sorted(plan.states.values(), key=lambda s: s.definition_hash)
    needs: dict[str, list[str]] = {}
    for st in states:
        for ev, w in st.writes.items():
            needs[ev] = sorted(set(needs.get(ev, [])) | set(w.deps()))
    try:
        with without_codegen(spark):
            frame, names = batch_features(raw, plan, needs)
            got = _rows(batch_write_rows(frame, names, states, 3))
            want = _rows(write_rows(feature_frames(raw, plan, states), states, 3))
    finally:
        raw.unpersist()
    assert got == want
    assert sum(want.values()) > 500
    assert len({r[0] for r in want}) == len(states)  # every state wrote


def test_batch_features_refuses_aggregates(spark):
    plan = compile_sources({"t.scowl": "event e\nk := $.k as string\nn := Count(by k last 1 hour)\n"
                                        "m := Count(by n last 1 hour)\n"}).plan
    df = spark.createDataFrame([("e", 0, 0, '{"k": "a"}')], "_type string, _time_ms long, _seq long, _raw string")
    with pytest.raises(StagedFeatureError):
        batch_features(df.where(F.lit(True)), plan, {"e": ["n"]})


@pytest.mark.parametrize("batch", [False, True])
def test_a_repeated_input_key_reads_as_its_last_value(spark, batch):
    """Inputs read a key repeated in the event's JSON as the API does (orjson: the last value), on both
    JSON parses of the writer (``with_features``, ``batch_features``), even on a session whose
    ``spark.sql.variant.allowDuplicateKeys`` was off: the writer turns it on (``writer.session.configure``)."""
    from compiler.typesystem import read_input
    from writer.features import with_features
    from writer.sources import events_from_json

    plan = compile_sources({"t.scowl": "event e\nk := $.k as string\nv := $.v as int\nw := v + 1\n"}).plan
    texts = ['{"_type": "e", "_time": 7, "k": "a", "k": "b", "v": 1, "v": 2}',
             '{"_type": "e", "_time": 1, "k": "c", "v": 3, "o": {"v": 9, "v": 8}}']
    key = "spark.sql.variant.allowDuplicateKeys"
    previous = spark.conf.get(key)
    spark.conf.set(key, "false")
    try:
        raw = events_from_json(spark, texts)
        if batch:
            df, names = batch_features(raw, plan, {"e": ["k", "v", "w"]})
            cols = [F.col(names["e"][n]).alias(n) for n in ("k", "v", "w")]
        else:
            df = with_features(raw.select("_time_ms", "_seq", "_raw"), plan.events["e"], ["k", "v", "w"])
            cols = [F.col(f"f_{n}").alias(n) for n in ("k", "v", "w")]
        got = [tuple(r) for r in df.orderBy("_seq").select(*cols).collect()]
        assert spark.conf.get(key) == "true"
    finally:
        spark.conf.set(key, previous)
    spec = {f.name: f for f in plan.events["e"].features}
    want = []
    for t in texts:
        body = orjson.loads(t)
        k, v = (read_input(body, spec[n].input, spec[n].type)[0] for n in ("k", "v"))
        want.append((k, v, v + 1))
    assert got == want == [("b", 2, 3), ("c", 3, 4)]


def test_a_repeated_envelope_key_reads_as_its_last_value(spark):
    """``_type`` and ``_time`` given twice read as their last value, as the API's parser (orjson) reads them."""
    from writer.sources import events_from_json

    texts = ['{"_type": "x", "_type": "e", "_time": 5, "_time": 7, "k": "a"}', '{"_type": "e", "_time": 1}']
    raw = events_from_json(spark, texts)
    assert [(r["_type"], r["_time_ms"]) for r in raw.orderBy("_seq").collect()] == [("e", 7), ("e", 1)]
    assert [(b["_type"], b["_time"]) for b in map(orjson.loads, texts)] == [("e", 7), ("e", 1)]


def test_stream_envelope_reads_like_replay_and_the_api(spark):
    """The stream's ``_type``/``_time`` (``raw_events``, ``dir_raw``) equal replay's (``events_from_json``) and orjson's.

    A repeated key reads as its last value; a nested ``_type`` is not the
    envelope's; a missing or unparseable ``_time`` is null.
    """
    from writer.sources import events_from_json
    from writer.stream import dir_raw, raw_events

    texts = ['{"_type": "x", "_type": "e", "_time": 5, "_time": 7, "k": "a"}', '{"_type": "e", "_time": 1}',
             '{"o": {"_type": "q", "_time": 3}, "_type": "e"}', '{"_time": "2024-01-01T00:00:00Z", "_type": "e"}',
             '{"_type": "e", "_time": "soon"}', '{"_type": 5, "_time": 2.5}']
    want = [(r["_type"], r["_time_ms"]) for r in events_from_json(spark, texts).orderBy("_seq").collect()]
    assert want[:3] == [("e", 7), ("e", 1), ("e", None)]
    assert [b.get("_type") for b in map(orjson.loads, texts)][:3] == ["e", "e", "e"]
    df = spark.createDataFrame([(i, t) for i, t in enumerate(texts)], "i long, _raw string").coalesce(1)
    got = [(r["_type"], r["_time_ms"]) for r in raw_events(df, F.col("i")).orderBy("_seq").collect()]
    assert got == want
    files = df.withColumn("_file", F.lit("f")).withColumn("_block", F.lit(0).cast("long")).orderBy("i")
    raw, _ = dir_raw(files.drop("i"))
    assert [(r["_type"], r["_time_ms"]) for r in raw.orderBy("_mid").collect()] == want
