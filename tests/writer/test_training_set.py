"""``scowl.training_set`` / ``training_sets`` / ``to_pandas`` (SPEC §5.8): replay as a library call.

The topology and events of ``tests/cli/test_replay.py`` (every output
encoding: time, duration, struct with a time, array of structs, tuple items,
bool, int beyond 2^53; Count, Sum, Latest, Sequence, Set, FirstTime, Max and
a cross-event Count; events with and without ``_id``) are replayed once by
:func:`writer.replay.run_replay` (what ``scowl replay`` runs) to Parquet;
``training_sets`` on the same JSONL must give the same columns, types and
rows, and the in-memory forms (a list of dicts, a pandas DataFrame, a Spark
DataFrame) the same as the file. All on the session's ``spark`` fixture.
"""

from __future__ import annotations

import json
import warnings
from datetime import datetime, timezone

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import scowl
from compiler import compile_dir
from tests.cli.test_replay import TOPOLOGY, _events
from writer.replay import run_replay

#: Spark schema of the events of :func:`_events` (a Spark DataFrame input).
SPARK_SCHEMA = ("_type string, _time long, _id string, user string, amount double, at long, flag boolean, "
                "big long")


@pytest.fixture(scope="module")
def case(spark, tmp_path_factory):
    """The topology, the events (a JSONL file without invalid lines) and ``run_replay``'s Parquet output."""
    tmp = tmp_path_factory.mktemp("training")
    topo = tmp / "topo"
    topo.mkdir()
    (topo / "t.scowl").write_text(TOPOLOGY)
    events = _events()
    path = tmp / "in.jsonl"
    path.write_text("".join(json.dumps(e) + "\n" for e in events))
    plan = compile_dir(topo).plan
    report = run_replay(spark, plan, [path], tmp / "out")
    assert report.rows == {"pay": 40, "probe": 8} and report.rejected == 0
    expected = {ev: pq.read_table(tmp / "out" / ev) for ev in report.rows}
    return {"topo": topo, "events": events, "path": path, "plan": plan, "expected": expected}


def _same(df, table: pa.Table) -> None:
    """A DataFrame equals a replay dataset: column names, Arrow types and rows in order."""
    got = df.toArrow()
    assert got.column_names == table.column_names
    for name in table.column_names:
        assert got.schema.field(name).type == table.schema.field(name).type, name
    assert got.to_pylist() == table.to_pylist()


@pytest.fixture(scope="module")
def frames(spark, case):
    """``training_sets`` of every type on the JSONL file (a list of paths), from the topology directory."""
    return scowl.training_sets(case["topo"], [case["path"]], spark)


def test_paths_equal_replay(case, frames):
    """training_sets on the JSONL path = run_replay's Parquet, every type; each column's plan type in its metadata."""
    assert list(frames) == ["pay", "probe"]
    for ev, df in frames.items():
        _same(df, case["expected"][ev])
    meta = {f.name: f.metadata.get("scowl_type") for f in frames["pay"].schema.fields}
    assert meta["_time"] == "time" and meta["at"] == "time" and meta["since"] == "duration"
    assert meta["prev"] == "struct{at:time,amount:float}" and meta["n"] == "int" and meta["_id"] == "string"


@pytest.mark.slow  # three replays
def test_in_memory_forms_equal_the_file(spark, case):
    """A list of dicts, a pandas DataFrame and a Spark DataFrame give the file's rows (``_seq`` = position)."""
    expected = case["expected"]["pay"]
    # datetimes for _time (naive = UTC, SPEC §3.1; aware), and an invalid record (last: no _seq moves)
    stamped = [{**e, "_time": datetime.fromtimestamp(e["_time"] / 1000, timezone.utc)} for e in case["events"]]
    for e in stamped[::2]:
        e["_time"] = e["_time"].replace(tzinfo=None)
    stamped.append({"_type": "pay", "user": "no time"})
    with pytest.warns(UserWarning, match="1 invalid record skipped"):
        _same(scowl.training_set(case["topo"], stamped, spark, event_type="pay"), expected)

    # object first: a float64 column would round 2**60 + i; _time as naive datetime64 (UTC)
    frame = pd.DataFrame(case["events"], dtype=object).astype({"big": "Int64", "at": "Int64", "amount": "float64"})
    frame["_time"] = pd.to_datetime(frame["_time"].astype("int64"), unit="ms")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # NaN / NA cells are missing fields, not invalid records
        _same(scowl.training_set(case["topo"], frame, spark, event_type="pay"), expected)

    rows = [tuple(e.get(c) for c in ("_type", "_time", "_id", "user", "amount", "at", "flag", "big"))
            for e in case["events"]]
    sdf = spark.createDataFrame(rows, SPARK_SCHEMA)
    _same(scowl.training_set(case["topo"], sdf, event_type="pay"), expected)  # the frame's own session


def test_event_type_errors(spark, case, tmp_path):
    """Several types without event_type, an unknown type, a topology with errors, a bad input: clear errors."""
    with pytest.raises(ValueError, match=r"2 event types with features: pay \(40 events\), probe \(8 events\); "
                                         r"choose one with event_type="):
        scowl.training_set(case["topo"], case["events"], spark)
    with pytest.raises(ValueError, match=r"unknown event type 'pays' \(did you mean pay\?\); the topology has pay, probe"):
        scowl.training_set(case["topo"], case["events"], spark, event_type="pays")
    with pytest.raises(ValueError, match="unknown event type 'nope'"):
        scowl.training_sets(case["topo"], case["events"], spark, event_types=["pay", "nope"])
    (tmp_path / "bad.scowl").write_text("event e\nx := $.x as int\ny := Count(by nope)\n")
    with pytest.raises(scowl.TopologyError) as err:
        scowl.training_set(tmp_path, case["events"], spark)
    assert isinstance(err.value, ValueError) and "bad.scowl:3:" in str(err.value) and "E0301" in str(err.value)
    assert f"topology {tmp_path} has 1 error:\n" in str(err.value)
    assert [d.code for d in err.value.diagnostics] == ["E0301"]
    with pytest.raises(TypeError, match="only paths or only event dicts"):
        scowl.training_set(case["topo"], [case["path"], {"_type": "pay"}], spark)
    with pytest.raises(TypeError, match="expected path"):
        scowl.training_set(case["topo"], 42, spark)
    with pytest.raises(ValueError, match="no input files match"):
        scowl.training_set(case["topo"], str(tmp_path / "missing*.jsonl"), spark)
    (tmp_path / "bad.parquet").write_bytes(b"no")  # before any Spark job, not the job's error
    with pytest.raises(ValueError, match=r"bad\.parquet is not a readable Parquet file \(Parquet file size is 2"):
        scowl.training_set(case["topo"], [case["path"], str(tmp_path / "bad.parquet")], spark)


def test_only_type_present_is_the_default(spark, case):
    """With one event type in the input, event_type may be left out (a probe reads 0 pays); a type without events."""
    probes = [e for e in case["events"] if e["_type"] == "probe"]
    probe_set = scowl.training_set(case["plan"], probes, spark)  # a compiled plan works too
    assert len(probe_set.to_pandas()) == len(probes)
    rows = probe_set.toArrow().to_pylist()
    assert [r["_seq"] for r in rows] == list(range(len(probes)))
    assert {r["n_pay"] for r in rows} == {0} and list(rows[0]) == ["_seq", "_time", "user", "n_pay"]
    # a type of the topology without events in the input: an empty frame with its columns (no _id)
    empty = scowl.training_sets(case["plan"], probes, spark, event_types=["pay"])["pay"]
    assert empty.count() == 0
    assert empty.columns == [c for c in case["expected"]["pay"].column_names if c != "_id"]


def test_to_pandas_types(case, frames):
    """Times datetime64[ms, UTC], durations timedelta64, exact Int64 ints, nullable booleans; after select too."""
    df = frames["pay"]
    pdf = df.to_pandas()  # the convenience method of a training set (the function for derived frames, below)
    assert pdf.equals(scowl.to_pandas(df))
    expected = case["expected"]["pay"].to_pylist()
    assert len(pdf) == len(expected) and list(pdf.columns) == [c for c in expected[0]]
    assert str(pdf["_seq"].dtype) == "int64"
    for col in ("_time", "at", "first_at"):
        assert str(pdf[col].dtype) == "datetime64[ms, UTC]", col
    assert pdf["_time"][0] == pd.Timestamp("2013-01-01T00:26:40.000Z")
    assert [t.isoformat(timespec="milliseconds").replace("+00:00", "Z") for t in pdf["_time"]] == \
        [r["_time"] for r in expected]
    assert str(pdf["since"].dtype) == "timedelta64[ns]"
    since = [r["since"] for r in expected]
    assert [None if pd.isna(x) else x.total_seconds() for x in pdf["since"]] == since
    assert pdf["since"].isna().sum() == sum(s is None for s in since) > 0
    assert str(pdf["big"].dtype) == "Int64" and int(pdf["big"][0]) == 2**60  # exact beyond 2^53
    assert str(pdf["n"].dtype) == "Int64" and str(pdf["flag"].dtype) == "boolean"
    i = next(i for i, r in enumerate(expected) if r["prev"] is not None)
    assert pdf["prev"][i] == expected[i]["prev"] and isinstance(pdf["prev"][i]["at"], str)  # nested: ISO strings
    # column metadata survives select / where / alias
    small = scowl.to_pandas(df.where("user = 'a'").select("at", df["since"].alias("gap")))
    assert str(small["at"].dtype) == "datetime64[ms, UTC]" and str(small["gap"].dtype) == "timedelta64[ns]"


def test_a_redis_stream_input_equals_the_file(spark, case, redis_url, tmp_path, monkeypatch):
    """``events="redis:KEY"``: that stream of ``SCOWL_REDIS_URL`` (entries as the API appends them: field
    ``event``), exported in its order to ``SCOWL_HOME/exports/``, gives the file's rows; without a store URL,
    or for a key the store does not hold, a ``ValueError`` says so before any job."""
    import redis

    from tests.e2e.store_dump import db_url

    url = db_url(redis_url, 15)
    client = redis.Redis.from_url(url)
    client.flushdb()
    for e in case["events"]:
        client.xadd("ev", {"event": json.dumps(e)})
    monkeypatch.setenv("SCOWL_HOME", str(tmp_path / "home"))
    monkeypatch.delenv("SCOWL_REDIS_URL", raising=False)
    with pytest.raises(ValueError, match="needs the store in SCOWL_REDIS_URL"):
        scowl.training_set(case["topo"], "redis:ev", spark, event_type="pay")
    monkeypatch.setenv("SCOWL_REDIS_URL", url)
    _same(scowl.training_set(case["topo"], "redis:ev", spark, event_type="pay"), case["expected"]["pay"])
    assert len(list((tmp_path / "home" / "exports").glob("ev-*.jsonl"))) == 1
    with pytest.raises(ValueError, match="the store holds no key 'nope'"):
        scowl.training_set(case["topo"], ["redis:nope"], spark, event_type="pay")
    client.flushdb()
