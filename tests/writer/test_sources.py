"""Event sources (SPEC §5.6, §6): JSONL and Parquet, 0-based ``_seq`` in file order."""

from __future__ import annotations

import json

import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from writer.sources import SourceError, expand_paths, read_events


def _jsonl(path, events, blank_after=None):
    with open(path, "w") as f:
        for i, e in enumerate(events):
            f.write(json.dumps(e) + "\n")
            if i == blank_after:
                f.write("\n   \n")


def test_seq_is_position_in_file_order_across_jsonl_and_parquet(spark, tmp_path):
    a = [{"_type": "a", "_time": 5_000 - i, "x": i} for i in range(40)]  # times descending: order is by file, not time
    _jsonl(tmp_path / "1.jsonl", a, blank_after=7)
    b = pd.DataFrame({"_type": ["b"] * 25, "_time": pd.to_datetime([1_357_017_420_000 + i for i in range(25)], unit="ms", utc=True),
                      "y": list(range(25)), "big": [2**60 + i for i in range(25)]})
    spark.createDataFrame(b).repartition(3).write.parquet(str(tmp_path / "2.parquet"))
    c = [{"_type": "c", "_time": "2013-01-01T00:00:00Z", "k": "z"}, "not json", {"_time": 1}]
    with open(tmp_path / "3.jsonl", "w") as f:
        f.write("\n".join(x if isinstance(x, str) else json.dumps(x) for x in c) + "\n")
    rows = read_events(spark, [str(tmp_path)]).collect()
    seqs = sorted(r["_seq"] for r in rows)
    assert seqs == list(range(40 + 25 + 3))
    by_seq = {r["_seq"]: r for r in rows}
    assert [json.loads(by_seq[i]["_raw"])["x"] for i in range(40)] == list(range(40))
    assert by_seq[0]["_time_ms"] == 5_000 and by_seq[39]["_time_ms"] == 4_961
    parquet = [json.loads(by_seq[i]["_raw"]) for i in range(40, 65)]
    assert sorted(p["y"] for p in parquet) == list(range(25))
    for p, r in zip(parquet, [by_seq[i] for i in range(40, 65)]):
        assert p["big"] == 2**60 + p["y"]  # int64 exact through to_json
        assert r["_time_ms"] == 1_357_017_420_000 + p["y"] and r["_type"] == "b"
    assert by_seq[65]["_time_ms"] == 1_356_998_400_000
    assert by_seq[66]["_type"] is None and by_seq[67]["_type"] is None  # invalid records keep their position


def test_parquet_epoch_ms_time(spark, tmp_path):
    df = spark.createDataFrame([("a", 1_000, 1), ("a", 2_000, 2)], "_type string, _time long, x long")
    df.coalesce(1).write.parquet(str(tmp_path / "e.parquet"))
    rows = sorted((r["_seq"], r["_time_ms"]) for r in read_events(spark, [str(tmp_path / "e.parquet")]).collect())
    assert rows == [(0, 1_000), (1, 2_000)]


def test_missing_input_is_an_error(tmp_path):
    with pytest.raises(SourceError, match="no input files match"):
        expand_paths([str(tmp_path / "nope*.jsonl")])


def test_event_id_reads_every_spelling_of_the_key(spark):
    """``event_id`` skips the parse only for texts that cannot hold an ``_id`` key (escaped keys included)."""
    from writer.sources import event_id

    texts = ['{"_id": "a", "x": 1}', '{"\\u005fid": 7}', '{"\\u005f\\u0069\\u0064": "e"}', '{"x": "_id"}',
             '{"a": 1}', '{"a": "\\n"}', '{"_id": null}', '{"x": {"_id": 3}}', '{"_ID": 4}', '{"_id": "p", "_id": "q"}',
             '{"_id": 12}', 'not json "_id"']
    got = [r[0] for r in spark.createDataFrame([(t,) for t in texts], "_raw string").select(event_id()).collect()]
    assert got == ["a", "7", "e", None, None, None, None, None, None, "q", "12", None]


def test_replay_renumbering_equals_read_events_numbering(spark, tmp_path):
    """``prepare_events(.., renumber=True)`` over ``read_events(dense_seq=False)`` gives every record the
    ``_seq`` that ``read_events`` gives it (several files and partitions, blank lines, invalid records)."""
    from compiler import compile_sources
    from writer.replay import prepare_events

    plan = compile_sources({"t.scowl": "event a\nx := $.x as int\n"}).plan
    for f in range(3):
        _jsonl(tmp_path / f"{f}.jsonl", [{"_type": "a", "_time": 1000 * f + i, "x": i} if i % 7 else {"_type": "zz", "f": f, "i": i}
                                          for i in range(50 + 20 * f)], blank_after=5)
    spark.createDataFrame(pd.DataFrame({"_type": ["a"] * 30, "_time": list(range(30)), "x": list(range(30))})) \
        .repartition(3).write.parquet(str(tmp_path / "p.parquet"))
    dense = {r["_raw"]: r["_seq"] for r in read_events(spark, [str(tmp_path)]).collect()}
    prepared = prepare_events(plan, read_events(spark, [str(tmp_path)], dense_seq=False), renumber=True)
    try:
        got = {r["_raw"]: r["_seq"] for r in prepared.events.collect()}
        assert prepared.rejected == sum(1 for i in range(3) for j in range(50 + 20 * i) if j % 7 == 0)
        assert len(got) == prepared.present["a"] and got == {k: v for k, v in dense.items() if k in got}
        assert sorted(dense.values()) == list(range(len(dense)))
    finally:
        prepared.release()


@pytest.mark.parametrize("job", ["replay", "backfill"])
def test_reading_parses_caches_and_counts_in_one_job(spark, tmp_path, job):
    """Replay's ``prepare_events`` and backfill's reading fill the cache of parsed records and count them in
    one Spark job: with adaptive execution the cache was a query stage of its own (a job filling it, one
    reading it back to count, one more for the result)."""
    from compiler import compile_sources
    from writer import backfill
    from writer.replay import prepare_events

    plan = compile_sources({"t.scowl": "event a\nx := $.x as int\n"}).plan
    _jsonl(tmp_path / "e.jsonl", [{"_type": "a", "_time": i, "x": i} for i in range(300)])
    sc = spark.sparkContext
    assert spark.conf.get("spark.sql.adaptive.enabled") == "true"  # the session's setting, left as it was
    sc.setJobGroup(f"scowl-test-read-{job}", job)
    try:
        if job == "replay":
            got = prepare_events(plan, read_events(spark, [str(tmp_path)], dense_seq=False), renumber=True)
            count, release = got.present, got.release
        else:
            got = backfill._read_input(spark, plan, [str(tmp_path)], None, lambda *a: None)
            count, release = {"a": got.valid}, got.raw.unpersist
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    try:
        assert count == {"a": 300}
        assert len(sc.statusTracker().getJobIdsForGroup(f"scowl-test-read-{job}")) == 1
    finally:
        release()


@pytest.mark.parametrize("parts", [2, 5])
def test_in_seq_order_puts_ranges_in_partition_order(spark, parts):
    """``writer.replay.in_seq_order``: partition ``i`` holds the ``i``-th range of ``_seq``, sorted within, so
    the rows come out (and Parquet files are written) in ``_seq`` order; a subset of ``_seq`` too."""
    import random

    from pyspark.sql import functions as F

    from writer.replay import in_seq_order
    from writer.session import spark_conf

    seqs = list(range(0, 3000, 3))
    random.Random(parts).shuffle(seqs)
    df = spark.createDataFrame([(s, f"v{s}") for s in seqs], "_seq long, v string").repartition(3)
    with spark_conf(spark, "spark.sql.shuffle.partitions", str(parts)):
        out = in_seq_order(df, 3000)
        rows = out.select("_seq", "v", F.spark_partition_id().alias("p")).collect()
    assert [r["_seq"] for r in rows] == sorted(seqs) and all(r["v"] == f"v{r['_seq']}" for r in rows)
    assert all(r["p"] == min(r["_seq"] * parts // 3000, parts - 1) for r in rows)


def test_estimate_events_counts_small_files_footers_and_samples_large_ones(tmp_path):
    """``estimate_events`` (picks a job's JVM options before Spark starts): a JSONL file within the
    sample is counted exactly (a last line without its newline included), Parquet by its footers, a
    larger JSONL file from its first MiB's mean line length."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from writer.sources import SAMPLE_BYTES, estimate_events

    _jsonl(tmp_path / "a.jsonl", [{"_type": "a", "_time": i} for i in range(7)])
    with open(tmp_path / "b.jsonl", "w") as f:
        f.write('{"_type": "a", "_time": 1}\n{"_type": "a", "_time": 2}')  # no final newline
    pq.write_table(pa.table({"_type": ["b"] * 11, "_time": list(range(11))}), tmp_path / "c.parquet")
    assert estimate_events([str(tmp_path / "a.jsonl")]) == 7
    assert estimate_events([str(tmp_path / "b.jsonl")]) == 2
    assert estimate_events([str(tmp_path / "c.parquet")]) == 11
    assert estimate_events([str(tmp_path)]) == 7 + 2 + 11  # a directory: every file in it

    big = tmp_path / "big" / "e.jsonl"
    big.parent.mkdir()
    n = 3 * SAMPLE_BYTES // 40
    _jsonl(big, [{"_type": "a", "_time": 10**12 + i, "k": "x" * (i % 13)} for i in range(n)])
    assert abs(estimate_events([str(big)]) - n) < 0.02 * n
    import gzip

    (tmp_path / "gz").mkdir()
    with gzip.open(tmp_path / "gz" / "e.jsonl.gz", "wb") as f:  # read by Spark's text source as is
        f.write(big.read_bytes())
    # within the decoder's read-ahead (it reads the compressed file in blocks): a factor, not a count
    assert abs(estimate_events([str(tmp_path / "gz" / "e.jsonl.gz")]) - n) < 0.25 * n
    (tmp_path / "gz" / "bad.parquet").write_bytes(b"not parquet")  # unreadable: a SourceError (the test below)
    with pytest.raises(SourceError, match="bad.parquet is not a readable Parquet file"):
        estimate_events([str(tmp_path / "gz" / "bad.parquet")])
    with pytest.raises(SourceError, match="no input files match"):
        estimate_events([str(tmp_path / "nope*.jsonl")])


def test_spark_hash_long_is_sparks_hash(spark):
    import random

    from pyspark.sql import functions as F

    from writer.sources import spark_hash_long

    rng = random.Random(7)
    values = [0, 1, -1, 2**31 - 1, 2**31, -2**31, 2**32, 2**63 - 1, -2**63]
    values += [rng.randrange(-2**63, 2**63) for _ in range(2000)] + list(range(-50, 50))
    rows = spark.createDataFrame([(v,) for v in values], "x long").select("x", F.hash("x").alias("h")).collect()
    assert [spark_hash_long(r["x"]) for r in rows] == [r["h"] for r in rows]


@pytest.mark.parametrize("parts", [1, 2, 3, 8, 200])
def test_partition_keys_land_in_their_partitions(spark, parts):
    from pyspark.sql import functions as F

    from writer.sources import _partition_keys

    keys = _partition_keys(parts)
    assert len(keys) == parts
    df = spark.createDataFrame([(k, i) for i, k in enumerate(keys)], "k long, i int").repartition(parts, "k")
    assert sorted((r["i"], r["p"]) for r in df.select("i", F.spark_partition_id().alias("p")).collect()) == \
        [(i, i) for i in range(parts)]


def test_a_record_with_text_after_its_json_object_is_invalid_as_the_api_answers_it(spark, tmp_path):
    """A line that is one JSON object (and JSON whitespace) is an event; one with anything after its object
    (two objects joined without a newline, a stray brace or comma) is an invalid record, as the API answers
    such a body 400 (SPEC §4), not the first object alone (the second would be lost)."""
    import orjson
    from fastapi.testclient import TestClient

    ok = ['{"_type": "a", "_time": 1000, "x": 1}', '{"_type": "a", "_time": 1000}   ',
          '{"_type": "a", "_time": 1000, "s": "}"}', '{"_type": "a", "_time": 1000, "o": {"p": {"q": 1}}}\t',
          '{"_type": "a", "_time": 1000, "s": "x}y"} \r', '{"_type":"a","_time":1000,"l":[{"b":1},{"c":2}]}']
    bad = ['{"_type": "a", "_time": 1000}{"_type": "a", "_time": 2000}', '{"_type": "a", "_time": 1000} x',
           '{"_type": "a", "_time": 1000}}', '{"_type": "a", "_time": 1000},', '{"_type": "a", "_time": 1000}]',
           '{"_type": "a", "_time": 1000, "o": {"p": 1}} {"q": 2}', '{"_type": "a", "_time": 1000, "s": "}"} 5',
           '{"_type": "a", "_time": 1000},0]', '{"_type": "a", "_time": 1000}}x', '{"_type": "a", "_time": 1000},"k":1}',
           '{"_type": "a", "_time": 1000, "o": {}},0] {"_type": "a", "_time": 2000}', '{"_type": "a", "_time": 1000}, 0']
    path = tmp_path / "e.jsonl"
    path.write_text("\n".join(ok + bad) + "\n")
    rows = sorted(read_events(spark, [str(path)]).collect(), key=lambda r: r["_seq"])
    assert [r["_type"] for r in rows] == ["a"] * len(ok) + [None] * len(bad)
    # the API's parser agrees line by line: the first set parses, the second does not
    for text in ok:
        assert orjson.loads(text)["_type"] == "a"
    for text in bad:
        with pytest.raises(orjson.JSONDecodeError):
            orjson.loads(text)


def _api_reads(line: bytes):
    """``(_type, epoch ms)`` as the API reads an event body, or None where it answers 400 (SPEC §4)."""
    import orjson

    from compiler.typesystem import MAX_TIME_MS, MIN_TIME_MS, parse_time

    try:
        body = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(body, dict) or not isinstance(body.get("_type"), str):
        return None
    t = body.get("_time")
    if t is None or isinstance(t, bool):
        return None
    try:
        ms = parse_time(t)
    except (ValueError, TypeError, OverflowError):
        return None
    return (body["_type"], ms) if MIN_TIME_MS <= ms <= MAX_TIME_MS else None


#: Texts around an event's envelope: what Spark's JSON parse lets through and the API's parser (orjson) does not,
#: and their valid neighbours. ``%s`` is an envelope.
_JSON_EDGES = {
    "lone high surrogate escape": ('{%s,"s":"\\ud800"}', False), "lone low surrogate escape": ('{%s,"s":"x\\udc00"}', False),
    "surrogate pair escape": ('{%s,"s":"\\ud83d\\ude00"}', True), "raw tab in a string": ('{%s,"s":"a\tb"}', False),
    "raw control character": ('{%s,"s":"a\x01b"}', False), "raw NUL": ('{%s,"s":"a\x00b"}', False),
    "tab between tokens": ('{%s,\t"s":1}', True), "raw DEL": ('{%s,"s":"a\x7fb"}', True),
    "single-quoted key": ("{%s,'s':1}", False), "NaN": ('{%s,"n":NaN}', False),
    "400-digit integer": ('{%s,"n":' + "9" * 400 + "}", False), "309-digit integer": ('{%s,"n":1' + "0" * 308 + "}", True),
    "310-digit integer": ('{%s,"n":1' + "0" * 309 + "}", False), "1e400": ('{%s,"n":1e400}', False),
    "-1E+0309": ('{%s,"n":[1,-1E+0309]}', False), "largest double": ('{%s,"n":1.7976931348623157e308}', True),
    "rounds to the largest double": ('{%s,"n":1.7976931348623158e308}', True),
    "rounds to infinity": ('{%s,"n":1.7976931348623159e308}', False),
    "huge exponent in a string": ('{%s,"s":"1e999 and ' + "7" * 120 + '"}', True),
    "escaped quote before a huge exponent text": ('{%s,"s":"\\"1e999"}', True), "1e-999": ('{%s,"n":1e-999}', True),
    "integer beyond 64 bits": ('{%s,"n":18446744073709551616}', True), "deep 600": ('{%s,"d":' + "[" * 600 + "]" * 600 + "}", True),
    "deep 1100": ('{%s,"d":' + "[" * 1100 + "]" * 1100 + "}", False), "trailing comma": ('{%s,}', False),
    "text after": ('{%s} x', False), "U+FFFD itself": ('{%s,"s":"\ufffd"}', True),
    "escaped e acute": ('{%s,"s":"\\u00e9"}', True), "raw tab in a nested string": ('{%s,"o":{"s":"a\tb"}}', False),
    "single quotes in a nested object": ("{%s,\"o\":{'s':1}}", False), "exponent below 100": ('{%s,"n":1e99}', True),
    "nested, clean": ('{%s,"o":{"p":[1,{"q":"r"}]}}', True), "nested, then text": ('{%s,"o":{"p":1}},0]', False),
    "nested, 400 digits": ('{%s,"o":{"n":' + "9" * 400 + "}}", False),
    "210 digits and e99 overflow": ('{%s,"n":2' + "0" * 209 + 'e99}', False),
    "209 digits and e99": ('{%s,"n":' + "9" * 209 + 'e99}', True), "form feed after": ('{%s}\x0c', False), "byte order mark": ('\ufeff{%s}', False),
}


def test_a_record_the_api_answers_400_is_an_invalid_record(spark, tmp_path):
    """Every record whose text the API's parser (orjson) rejects is an invalid record of replay, backfill and
    stream (SPEC §4, §5.6), and every one it accepts is an event: lone surrogate escapes, raw control characters
    in strings, single quotes, numbers beyond the double range and bytes that are not UTF-8 were events to Spark
    (its JSON readers let them through) and 400 to the API; a run of digits or an exponent inside a string is
    no number."""
    envelope = '"_type":"a","_time":1000'
    lines = [(name, (text % envelope).encode()) for name, (text, _) in _JSON_EDGES.items()]
    lines += [("bytes that are not UTF-8", b'{%s,"s":"\xff\xfe"}' % envelope.encode()),
              ("UTF-8 of a surrogate", b'{%s,"s":"\xed\xa0\x80"}' % envelope.encode()),
              ("UTF-8 of U+2028", '{%s,"s":"a\u2028b"}'.replace("%s", envelope).encode())]
    want = {name: ok for name, (_, ok) in _JSON_EDGES.items()} | {
        "bytes that are not UTF-8": False, "UTF-8 of a surrogate": False, "UTF-8 of U+2028": True}
    path = tmp_path / "edges.jsonl"
    path.write_bytes(b"".join(line + b"\n" for _, line in lines))
    rows = sorted(read_events(spark, [str(path)]).collect(), key=lambda r: r["_seq"])
    assert len(rows) == len(lines)
    api = {name: _api_reads(line) for name, line in lines}
    assert {name: got is not None for name, got in api.items()} == want  # the table says what orjson says
    jobs = {name: (r["_type"], r["_time_ms"]) if r["_type"] is not None else None for (name, _), r in zip(lines, rows)}
    assert jobs == api


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.one_of(
    st.integers(min_value=-(2 ** 70), max_value=2 ** 70).map(str),
    st.integers(min_value=-62_167_219_200_000, max_value=253_402_300_799_999).map(str),
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e20, max_value=1e20).map(repr),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda x: f"{x:.17E}"),
    st.tuples(st.integers(0, 10 ** 13), st.text("0123456789", min_size=1, max_size=30)).map(lambda p: f"{p[0]}.{p[1]}"),
    st.tuples(st.integers(1, 99_999), st.integers(-30, 30)).map(lambda p: f"{p[0]}e{p[1]}"),
    st.integers(0, 10 ** 15).map(lambda n: f'"{n}"'), st.just("-0.0"), st.just("-0"), st.just("true"),
    st.just('"2024-03-01T00:00:00.5+01:00"'), st.just("[1]")), min_size=40, max_size=80))
def test_the_event_time_reads_as_the_api_reads_it(spark, tmp_path_factory, times):
    """``_time`` given as any JSON number (integers within and beyond 64 bits, floats in every notation,
    decimals with long fractions, exponents) or numeric text reads as the epoch ms the API reads from it,
    and where the API answers ``bad-time`` the record is invalid (SPEC §3.1, §4)."""
    lines = [b'{"_type":"a","_time":%s,"x":1}' % t.encode() for t in times]
    path = tmp_path_factory.mktemp("times") / "t.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    rows = sorted(read_events(spark, [str(path)]).collect(), key=lambda r: r["_seq"])
    got = [(r["_type"], r["_time_ms"]) if r["_type"] is not None and r["_time_ms"] is not None else None for r in rows]
    assert got == [_api_reads(line) for line in lines]


def test_estimate_events_refuses_files_it_cannot_read(tmp_path):
    """A command meets its inputs first in ``estimate_events``: a ``.parquet`` file without a readable footer
    (not Parquet, empty, in a dataset directory too), a ``.gz``/``.bz2`` file whose start does not decompress
    (not compressed, cut short) is a ``SourceError`` naming the file; a good compressed file still counts."""
    import gzip

    from writer.sources import estimate_events

    good = gzip.compress(b'{"a": 1}\n' * 100)
    (tmp_path / "ds").mkdir()
    files = {
        "bad.parquet": (b"garbage", "is not a readable Parquet file (Parquet file size is 7 bytes"),
        "empty.parquet": (b"", "is not a readable Parquet file (Parquet file size is 0 bytes)"),
        "ds/part-0.parquet": (b"x" * 100, "is not a readable Parquet file (Parquet magic bytes not found"),
        "bad.jsonl.gz": (b"not gzip", "does not decompress (Not a gzipped file"),
        "bad.jsonl.bz2": (b"not bz2", "does not decompress (Invalid data stream)"),
        "cut.jsonl.gz": (good[:len(good) // 2], "does not decompress (Compressed file ended before"),
    }
    for name, (data, why) in files.items():
        (tmp_path / name).write_bytes(data)
    for name, (_, why) in files.items():
        arg = tmp_path / ("ds" if name.startswith("ds/") else name)
        with pytest.raises(SourceError) as e:
            estimate_events([str(arg)])
        assert str(e.value).startswith(f"{tmp_path / name} {why}"), str(e.value)
    (tmp_path / "ok.jsonl.gz").write_bytes(good)
    assert estimate_events([str(tmp_path / "ok.jsonl.gz")]) == 100
    # a Parquet file whose magic bytes are there but whose footer does not parse (pyarrow: a bare OSError)
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"a": list(range(100))}), tmp_path / "footer.parquet")
    data = bytearray((tmp_path / "footer.parquet").read_bytes())
    size = int.from_bytes(data[-8:-4], "little")
    data[len(data) - 8 - size:len(data) - 8] = b"\xff" * size
    (tmp_path / "footer.parquet").write_bytes(bytes(data))
    with pytest.raises(SourceError, match=r"footer\.parquet is not a readable Parquet file \(Couldn't deserialize"):
        estimate_events([str(tmp_path / "footer.parquet")])
