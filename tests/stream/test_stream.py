"""``scowl stream`` (SPEC §5.7): real Spark Structured Streaming into a real Redis-protocol server.

One generated timeline is cut into three JSONL files of equal length (the
last one carries late and invalid records). The *reference* is one
uninterrupted in-process run over that directory, one file per micro-batch.
Against it:

* counts and dead letters (late events, invalid records) of the reference;
* feature values: streaming the history, then posting the live events to
  ``POST /batch``, answers exactly as posting every event to the API;
* the same batch processed twice leaves the state of one (exactly once);
  its watermark is the one recorded, whatever the new lateness;
* events the API appends to a Redis stream (``SCOWL_EVENT_STREAM``),
  streamed from it in batches of the same size, give the same state, key by
  key (float sums to 1e-9 relative, ``tests.e2e.store_dump.diff_stores``);
  the API appends only events it writes (not a repeated ``_id``);
* ``scowl stream`` killed with SIGKILL in the middle of a batch and restarted
  with the same checkpoint leaves exactly the reference state, key by key
  (every field and score), and the CLI's errors are clear (exit 1).

Runtime: one Spark streaming run in-process, one Redis-stream run, a few
single batches and two ``scowl stream`` subprocesses (each starts its own
JVM); several minutes on 2 busy cores.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest
import redis
from pyspark.sql import functions as F

from fastapi.testclient import TestClient

from compiler import compile_sources
from serving.app import create_app
from serving.settings import Settings
from tests.e2e.helpers import close, login_purchase_events, post_all
from tests.e2e.store_dump import assert_same_store, db_url
from writer.redisio import connect
from writer.stream import BatchProcessor, StreamError, open_checkpoint, raw_events, run_stream

TOPOLOGY = """
event login
user := $.user as string
ip := $.ip as string?
amount := $.amount as float?
items := $.items as int ? 0
n_ip_10m := Count(by ip last 10 minutes)
items_user := Sum(items by user last 1 day)
avg_amount_ip := Average(amount by ip last 6 hours)
min_amount_user := Min(amount by user last 3 hours)
max_user_ip := Max(user by ip last 1 day)
uniq_users_ip := CountUnique(user by ip last 1 hour)
last_ip := Latest(ip, items by user exclusive)
first_ip := First(ip by user last 2 hours)
seq_ip := Sequence(ip by user last 3 hours)
set_pair := Set(user, ip limit 5)
d_sum := DecayedSum(amount by ip last 10 minutes)
hll_ip := HyperLogLog(user by ip last 1 day)
spent_user := Sum<purchase>(total by user last 1 day)

event purchase
user := $.user as string
total := $.total as int
"""

START_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
LINES = 100  # lines per file = events per Redis-stream batch
DAY = 86_400_000
# older than the watermark of the last batch: the latest time seen minus the longest window (30 days)
LATE = [
    {"_type": "login", "_time": START_MS - 33 * DAY, "user": "late", "ip": "10.0.0.1", "amount": 1.0},
    {"_type": "purchase", "_time": START_MS - 31 * DAY, "user": "late", "total": 5},
    {"_type": "login", "_time": "2023-11-01T00:00:00Z", "user": "late2", "ip": "10.0.0.2"},
]
INVALID = ["not json at all", '{"_type": "nope", "_time": 5}']


def make_events(n: int, seed: int, start_ms: int) -> list[dict]:
    """``n`` login/purchase events from ``start_ms`` on, in time order, with ties and a unicode key."""
    return login_purchase_events(n, seed, start_ms, n_users=8, n_ips=5, digits=3)


def dump(url: str) -> dict:
    """Every ``sc:{...}`` key: hash fields or sorted-set (member, score) pairs, the stream-id part
    of the guard fields (``_b:<id>``) normalised to ``_b``. Asserts every key expires (SPEC §5.3).
    A cluster's keys come from every node."""
    client = connect(url)
    out = {}
    for key in client.scan_iter("sc:{*"):
        assert client.pttl(key) > 0, key
        if client.type(key) == b"zset":
            out[key] = client.zrange(key, 0, -1, withscores=True)
        else:
            out[key] = {re.sub(rb"^_b:[0-9a-f]+$", b"_b", f): v for f, v in client.hgetall(key).items()}
    client.close()
    return out


def restore(url: str, state: dict) -> None:
    """Write a :func:`dump` back (expiring in a day)."""
    client = redis.Redis.from_url(url)
    pipe = client.pipeline(transaction=False)
    for key, value in state.items():
        if isinstance(value, dict):
            pipe.hset(key, mapping=value)
        else:
            pipe.zadd(key, {m: s for m, s in value})
        pipe.pexpire(key, 86_400_000)
    pipe.execute()
    client.close()


@dataclass
class Reference:
    in_dir: Path
    lines: list[list[str]]  # per file
    history: list[dict]  # valid, on-time events, in order
    live: list[dict]  # events after the history
    report: object
    state: dict
    dead_letter: Path


@pytest.fixture(scope="module")
def plan():
    result = compile_sources({"t.scowl": TOPOLOGY})
    assert result.plan is not None, result.render()
    return result.plan


@pytest.fixture(scope="module")
def reference(spark, redis_server, plan, tmp_path_factory) -> Reference:
    base = tmp_path_factory.mktemp("stream")
    in_dir = base / "in"
    in_dir.mkdir()
    events = make_events(3 * LINES - len(LATE) - len(INVALID) + 60, seed=11, start_ms=START_MS)
    history, live = events[: 3 * LINES - len(LATE) - len(INVALID)], events[3 * LINES - len(LATE) - len(INVALID):]
    lines = [orjson.dumps(e).decode() for e in history]
    last = lines[2 * LINES:]
    for i, extra in enumerate([orjson.dumps(e).decode() for e in LATE] + INVALID):
        last.insert(7 + 9 * i, extra)
    per_file = [lines[:LINES], lines[LINES : 2 * LINES], last]
    now = time.time()
    for i, chunk in enumerate(per_file):
        assert len(chunk) == LINES
        p = in_dir / f"part-{i}.jsonl"
        p.write_text("\n".join(chunk) + "\n")
        os.utime(p, (now - 100 + 10 * i, now - 100 + 10 * i))  # Spark takes new files oldest first
    url = db_url(redis_server, 5)
    redis.Redis.from_url(url).flushdb()
    report = run_stream(spark, plan, url, f"dir:{in_dir}", base / "ck", available_now=True, max_files_per_trigger=1)
    state = dump(url)
    redis.Redis.from_url(url).flushdb()
    return Reference(in_dir, per_file, history, live, report, state, base / "ck" / "dead-letter")


def test_batches_counts_and_dead_letters(reference):
    rep = reference.report
    assert [b.batch_id for b in rep.batches] == [0, 1, 2]
    assert [b.events for b in rep.batches] == [LINES, LINES, LINES - len(LATE) - len(INVALID)]
    assert (rep.late, rep.invalid) == (len(LATE), len(INVALID))
    assert rep.totals == {"batches": 3, "events": len(reference.history), "late": len(LATE), "invalid": len(INVALID)}
    # watermark: the largest event time of the earlier batches minus the longest window (30 days)
    assert rep.batches[0].watermark_ms is None
    assert rep.batches[2].watermark_ms == reference.history[2 * LINES - 1]["_time"] - 30 * DAY
    assert all(b.skipped == 0 and not b.rerun for b in rep.batches)
    late = "".join(p.read_text() for p in (reference.dead_letter / "late").rglob("part-*"))
    invalid = "".join(p.read_text() for p in (reference.dead_letter / "invalid").rglob("part-*"))
    assert sorted(late.splitlines()) == sorted(orjson.dumps(e).decode() for e in LATE)
    assert sorted(invalid.splitlines()) == sorted(INVALID)
    assert reference.state and not any(b"late" in k for k in reference.state)


def test_stream_then_api_equals_api_only(reference, plan, redis_url):
    online_only = post_all(plan, db_url(redis_url, 1), reference.history + reference.live)[len(reference.history):]
    restore(redis_url, reference.state)
    mixed = post_all(plan, redis_url, reference.live)
    assert len(mixed) == len(online_only) == len(reference.live)
    for i, (a, b) in enumerate(zip(online_only, mixed)):
        diffs = {k: (a[k], b[k]) for k in a if not close(a[k], b[k])}
        assert not diffs, f"live event {i} ({reference.live[i]}): {diffs}"


def test_stream_then_late_api_events_equal_api_only(reference, plan, redis_url):
    """SPEC §3.3, §5.7: the 1-second-resolution tiled aggregates of events 40 minutes late (within the
    allowed lateness), posted after the stream merged the history, are answered as when the API took
    every event: the stream's pruning keeps what a late read counts, as serving's passes do (it pruned
    the 10-minute window's tiles such a read needs). Each late time is in a second no history event
    falls in: a stream merge keeps no raw entries yet, so a late read's own resolution tile would count
    the writes after it in that tile; for the same reason write logs, ``CountUnique``, ``Decayed*`` and
    the minute-resolution states are left out (their late reads after a stream are not exact yet)."""
    tiled = ("n_ip_10m", "avg_amount_ip", "min_amount_user", "first_ip")
    last = reference.history[-1]["_time"]
    busy = {e["_time"] // 1000 for e in reference.history}
    times = [t for t in range(last - 40 * 60_000, last - 30 * 60_000, 7_000) if t // 1000 not in busy][:20]
    late = [dict(e, _time=t) for e, t in zip(reference.live, times)]
    assert len(late) == 20
    online_only = post_all(plan, db_url(redis_url, 1), reference.history + late)[len(reference.history):]
    restore(redis_url, reference.state)
    mixed = post_all(plan, redis_url, late)
    assert len(mixed) == len(online_only) == len(late)
    assert sum(a.get("n_ip_10m") or 0 for a in online_only) > 0
    for i, (a, b) in enumerate(zip(online_only, mixed)):
        diffs = {k: (a[k], b[k]) for k in tiled if k in a and not close(a[k], b[k])}
        assert not diffs, f"late event {i} ({late[i]}): {diffs}"


SMALL = """
event login
user := $.user as string
ip := $.ip as string?
amount := $.amount as float?
n_ip := Count(by ip last 10 minutes)
avg_ip := Average(amount by ip last 1 hour)
seq_user := Sequence(ip by user last 1 hour)
"""


def test_stream_on_a_cluster_equals_a_single_server(spark, plan, reference, redis_cluster, tmp_path):
    """SPEC §5.1, §5.7: the same files streamed into a 3-master cluster (executors merging into the nodes
    of their keys, batch markers beside each key) leave the state the single server holds."""
    report = run_stream(spark, plan, redis_cluster.url, f"dir:{reference.in_dir}", tmp_path / "ck",
                        available_now=True, max_files_per_trigger=1)
    assert [(b.events, b.late) for b in report.batches] == [(b.events, b.late) for b in reference.report.batches]
    assert all(redis_cluster.node(i).dbsize() > 0 for i in range(redis_cluster.masters))
    assert_same_store(dump(redis_cluster.url), reference.state, plan)  # float sums to 1e-9 (Spark's order)


def test_same_batch_twice_applies_once(spark, redis_url, reference, tmp_path):
    small = compile_sources({"t.scowl": SMALL}).plan
    ck = tmp_path / "ck"
    proc = BatchProcessor(small, redis_url, ck, open_checkpoint(ck, "test"), 86_400_000, tmp_path / "dl")
    df = spark.createDataFrame([(line,) for line in reference.lines[0]], "_raw string")
    raw = raw_events(df, F.monotonically_increasing_id())
    first = proc.process(raw, 0)
    once = dump(redis_url)
    assert first.applied > 0 and first.skipped == 0 and not first.rerun
    assert any(isinstance(v, list) for v in once.values()) and any(b".c" in f for v in once.values() if isinstance(v, dict) for f in v)
    again = proc.process(raw, 0)  # a re-run of batch 0 after a crash
    assert (again.applied, again.skipped, again.rerun) == (0, first.applied, True)
    assert dump(redis_url) == once


def test_rerun_keeps_its_recorded_watermark(spark, redis_url, tmp_path):
    one = compile_sources({"t.scowl": "event e\nk := $.k as string\nn := Count(by k last 1 hour)\n"}).plan
    ck = tmp_path / "ck"
    sid = open_checkpoint(ck, "test")

    def batch(events):
        df = spark.createDataFrame([(orjson.dumps(e).decode(),) for e in events], "_raw string")
        return raw_events(df, F.monotonically_increasing_id())

    first = BatchProcessor(one, redis_url, ck, sid, 3_600_000, tmp_path / "dl")
    assert first.process(batch([{"_type": "e", "_time": 10_000_000, "k": "a"}]), 0).late == 0
    second = batch([{"_type": "e", "_time": 6_000_000, "k": "a"}, {"_type": "e", "_time": 6_500_000, "k": "b"}])
    r1 = first.process(second, 1)
    assert (r1.watermark_ms, r1.late, r1.events) == (6_400_000, 1, 1)
    # restarted with another lateness: the re-run batch keeps its watermark
    r2 = BatchProcessor(one, redis_url, ck, sid, 0, tmp_path / "dl").process(second, 1)
    assert (r2.watermark_ms, r2.late, r2.events, r2.applied) == (6_400_000, 1, 1, 0)
    late = "".join(p.read_text() for p in (tmp_path / "dl" / "late").rglob("part-*"))
    assert late.count('"_time"') == 1 and "6000000" in late


def test_api_append_then_redis_stream_source_equals_dir_source(spark, plan, redis_url, reference, tmp_path):
    # the API appends what it writes to a Redis stream in its own store ...
    api_db = db_url(redis_url, 2)
    app = create_app(plan, Settings(event_stream="events"), redis_url=api_db)
    with TestClient(app) as c:
        r = c.post("/batch", content=orjson.dumps(reference.history), headers={"content-type": "application/json"})
        assert r.status_code == 200, r.text
    client = redis.Redis.from_url(api_db)
    assert client.xlen("events") == len(reference.history)
    client.xadd("events", {"event": "not json at all"})
    client.xadd("events", {"user": "no _type"})  # no event field: the fields as an object
    # ... and a stream job into another store, in batches of the reference's size, gives the reference's state
    report = run_stream(spark, plan, redis_url, "redis:events", tmp_path / "ck", source_url=api_db,
                        available_now=True, max_events_per_batch=LINES)
    assert [b.events for b in report.batches] == [b.events for b in reference.report.batches]
    assert (report.late, report.invalid) == (0, 2)
    assert_same_store(dump(redis_url), reference.state, plan)  # float sums to 1e-9 (Spark's summation order)
    # nothing new: a second run processes no batch
    again = run_stream(spark, plan, redis_url, "redis:events", tmp_path / "ck", source_url=api_db, available_now=True)
    assert again.batches == [] and again.totals["batches"] == 3
    with pytest.raises(StreamError, match="belongs to source"):
        run_stream(spark, plan, redis_url, "redis:other", tmp_path / "ck", source_url=api_db, available_now=True)


def test_api_appends_only_events_it_writes(redis_url):
    two = compile_sources({"t.scowl": "event e\nk := $.k as string\nn := Count(by k)\n\n"
                                      "event q\nk := $.k as string\nm := Count<e>(by k)\n"}).plan
    with TestClient(create_app(two, Settings(event_stream="ev"), redis_url=redis_url)) as c:
        for body in [{"_type": "e", "_time": "1970-01-01T00:00:01Z", "k": "a", "_id": "x"},
                     {"_type": "e", "_time": 1000, "k": "a", "_id": "x"},  # a repeated _id writes nothing
                     {"_type": "q", "_time": 2000, "k": "a"},  # a query event writes nothing
                     {"_type": "e", "k": "b"}]:  # server time
            assert c.post("/event", json=body).status_code == 200
    entries = [orjson.loads(f[b"event"]) for _, f in redis.Redis.from_url(redis_url).xrange("ev")]
    assert entries[0] == {"_type": "e", "_time": 1000, "k": "a", "_id": "x"}
    assert len(entries) == 2 and entries[1]["k"] == "b" and isinstance(entries[1]["_time"], int) and entries[1]["_id"]
    with TestClient(create_app(two, Settings(), redis_url=db_url(redis_url, 1))) as c:
        assert c.post("/event", json={"_type": "e", "k": "a"}).status_code == 200
    assert not redis.Redis.from_url(db_url(redis_url, 1)).exists("ev")


def _scowl(args, env, **kw):
    return subprocess.Popen([sys.executable, "-m", "scowl", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, **kw)


def test_sigkill_mid_batch_then_restart_equals_one_run(reference, plan, redis_url, tmp_path):
    topo = tmp_path / "topo"
    topo.mkdir()
    (topo / "t.scowl").write_text(TOPOLOGY)
    url = db_url(redis_url, 3)
    env = {**os.environ, "SCOWL_REDIS_URL": url, "SCOWL_HOME": str(tmp_path / "home"), "SCOWL_SPARK_MASTER": "local[2]",
           "SCOWL_SHUFFLE_PARTITIONS": "2", "SCOWL_DRIVER_MEMORY": "1g"}
    args = ["stream", str(topo), "--source", f"dir:{reference.in_dir}", "--checkpoint", str(tmp_path / "ck"),
            "--available-now", "--max-files-per-trigger", "1"]
    hang = tmp_path / "hang"
    # batch 1 hangs after 3 keys of a partition are merged: SIGKILL the whole job there
    proc = _scowl(args, {**env, "SCOWL_STREAM_FAULT": f"1:3:{hang}"}, start_new_session=True)
    try:
        deadline = time.time() + 300
        while not hang.exists():
            assert proc.poll() is None, proc.stdout.read()
            assert time.time() < deadline, "the job never reached batch 1"
            time.sleep(0.2)
        partial = dump(url)
        markers = [v.get(b"_b") for v in partial.values() if isinstance(v, dict)]
        assert b"1" in markers and partial != reference.state
    finally:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    assert proc.returncode == -signal.SIGKILL

    done = _scowl(args, env)
    out, _ = done.communicate(timeout=400)
    assert done.returncode == 0, out
    assert "batch 1 (re-run after a restart)" in out and "batch 2:" in out and "batch 0" not in out
    assert_same_store(dump(url), reference.state, plan)  # float sums to 1e-9 (Spark's summation order)


def test_cli_errors_are_clear(tmp_path):
    topo = tmp_path / "topo"
    topo.mkdir()
    (topo / "t.scowl").write_text(TOPOLOGY)
    staged = tmp_path / "staged"
    staged.mkdir()
    (staged / "t.scowl").write_text("event e\nk := $.k as string\nn := Count(by k)\nm := Sum(n by k)\n")
    env = {**os.environ, "SCOWL_REDIS_URL": "redis://127.0.0.1:1/0", "SCOWL_HOME": str(tmp_path / "home")}
    cases = [
        (["stream", str(topo), "--source", "kafka:x"], "--source must be dir:PATH or redis:STREAM"),
        (["stream", str(topo), "--source", f"dir:{tmp_path / 'missing'}"], "is not a directory"),
        (["stream", str(topo), "--source", "redis:x", "--allowed-lateness", "soon"], "not a duration"),
        (["stream", str(staged), "--source", "redis:x"], "depend on other aggregates"),
    ]
    for args, message in cases:
        p = _scowl(args, env)
        out, _ = p.communicate(timeout=60)
        assert p.returncode == 1, (args, out)
        assert message in " ".join(out.split()) and "Traceback" not in out, (args, out)


def test_later_batches_reuse_the_compiled_stages(spark, redis_url, tmp_path):
    """Each micro-batch builds its frames anew from the same code and a new watermark; from the third
    batch on (the first has no watermark) a batch compiles nothing: not its parsing, counting and merge
    stages (``writer.session.restart_lambda_names``; the watermark a column of the cached batch, not a
    literal), nor the projection that adds the watermark (its decimal text, a string literal, which
    Spark's generated code reads from its references; a long literal is written into the code): a stage
    compiled again ran as a new class, interpreted until HotSpot compiled it again, in every batch."""
    small = compile_sources({"t.scowl": SMALL}).plan
    ck = tmp_path / "ck"
    proc = BatchProcessor(small, redis_url, ck, open_checkpoint(ck, "test"), 3_600_000, tmp_path / "dl")
    compiles = spark._jvm.org.apache.spark.metrics.source.CodegenMetrics.METRIC_COMPILATION_TIME()
    counts = []
    for i in range(4):
        events = [e for e in make_events(60, seed=20 + i, start_ms=START_MS + i * 3_600_000) if e["_type"] == "login"]
        batch = spark.createDataFrame([(orjson.dumps(e).decode(), 1000 * i + j) for j, e in enumerate(events)],
                                      "_raw string, _seq long")
        before = compiles.getCount()
        proc(batch, i)
        counts.append(compiles.getCount() - before)
        assert proc.results[-1].events == len(events) and proc.results[-1].late == 0
    assert proc.results[-1].watermark_ms is not None
    assert counts[2] == counts[3] == 0, counts


def test_dir_batch_of_several_files_keeps_path_order(spark, redis_url, tmp_path):
    """SPEC §3.3, §5.7: the events of one ``dir:`` micro-batch arrive in (file path, line) order, ties in
    event time included. A batch of several files is numbered by its file splits, which the job that
    counts the batch collects; the merge job planned while that job runs assumes one split, so such a
    batch is planned again (``BatchProcessor.process``). Here ``a.jsonl`` (3 lines) and ``b.jsonl`` (1
    line) are read as separate file splits whose lines number from 0 each: numbered by position alone,
    ``b0`` would tie ``a0`` and sort before ``a1`` and ``a2``."""
    topo = ("event e\nk := $.k as string\nv := $.v as string\n"
            "last_v := Latest(v by k exclusive)\nseq_v := Sequence(v by k last 1 hour exclusive)\n")
    plan = compile_sources({"t.scowl": topo}).plan
    src = tmp_path / "in"
    src.mkdir()
    lines = {"a.jsonl": ["a0", "a1", "a2"], "b.jsonl": ["b0"]}
    for name, values in lines.items():
        (src / name).write_text("".join(
            orjson.dumps({"_type": "e", "_time": START_MS, "k": "x", "v": v}).decode() + "\n" for v in values))
    url = db_url(redis_url, 6)
    redis.Redis.from_url(url).flushdb()
    report = run_stream(spark, plan, url, f"dir:{src}", tmp_path / "ck", available_now=True)
    assert [(b.events, b.applied > 0) for b in report.batches] == [(4, True)]
    probe = post_all(plan, url, [{"_type": "e", "_time": START_MS + 1000, "k": "x", "v": "p"}])[0]
    assert (probe["last_v"], probe["seq_v"]) == ("b0", ["a0", "a1", "a2", "b0"])
