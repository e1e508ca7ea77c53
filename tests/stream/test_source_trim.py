"""``scowl stream --trim-source`` and a Redis stream trimmed past the checkpoint (SPEC §5.7, ``writer.redis_source``).

* A ``redis:`` job with ``trim_source`` deletes the entries of committed
  micro-batches, keeping each committed batch's last entry, and leaves
  exactly the state of the same job without trimming (the reference of
  ``test_stream.py``: one uninterrupted run over the same events in batches
  of the same size), across two runs.
* A stream trimmed past the last entry a job read (here by ``XTRIM``, as a
  producer's ``MAXLEN`` would) stops the next run with a clear error naming
  that entry; ``skip_trimmed`` goes on with what is left.
* A ``dir:`` job with ``trim_source`` deletes the files of committed
  micro-batches (Spark's ``cleanSource=delete``).
* ``scowl stream`` on a stream trimmed past its checkpoint exits 1 with that
  one line: no Spark error log, no traceback.
* The reader alone: its ``trim``/``failOnDataLoss``/``lossFile`` options.
* The CLI refuses ``--skip-trimmed`` on a ``dir:`` source (exit 1, one line).

Runtime: five short streaming runs in the session's Spark, one ``scowl
stream`` process (its own JVM) and one CLI call that stops before Spark.
"""

from __future__ import annotations

import os
import shutil

import orjson
import pytest
import redis

from tests.e2e.store_dump import assert_same_store, db_url
from tests.stream.test_stream import LINES, _scowl, dump, make_events, plan, reference, START_MS, TOPOLOGY  # noqa: F401
from writer.redis_source import RedisStreamReader, TrimmedPastCheckpoint, entry_seq
from writer.stream import StreamError, run_stream


def _source(redis_url: str, db: int) -> tuple[str, redis.Redis]:
    """A flushed database ``db`` of the test store for a source stream: its URL and a client."""
    src = db_url(redis_url, db)
    client = redis.Redis.from_url(src)
    client.flushdb()
    return src, client


def _logins(n: int, seed: int) -> list[dict]:
    """The ``login`` events among ``make_events(n, seed)`` (the source streams' events)."""
    return [e for e in make_events(n, seed=seed, start_ms=START_MS) if e["_type"] == "login"]


def _append(client: redis.Redis, key: str, events: list[dict]) -> list[str]:
    """XADD each event's JSON as the entry's ``event`` field; return the entry ids in order."""
    pipe = client.pipeline(transaction=False)
    for e in events:
        pipe.xadd(key, {"event": orjson.dumps(e)})
    return [i.decode() for i in pipe.execute()]


def _ids(client: redis.Redis, key: str) -> list[str]:
    return [i.decode() for i, _ in client.xrange(key)]


def test_trim_source_deletes_committed_entries_and_keeps_the_state(spark, plan, redis_url, reference, tmp_path):
    src, client = _source(redis_url, 3)
    history = reference.history
    cut = 2 * LINES
    first = _append(client, "events", history[:cut])
    report = run_stream(spark, plan, redis_url, "redis:events", tmp_path / "ck", source_url=src,
                        available_now=True, max_events_per_batch=LINES, trim_source=True)
    assert [b.events for b in report.batches] == [LINES, LINES]
    # batch 0 is committed (trimmed up to its last entry, which stays); batch 1's commit comes with the next batch
    assert _ids(client, "events") == first[LINES - 1:]
    rest = _append(client, "events", history[cut:])
    again = run_stream(spark, plan, redis_url, "redis:events", tmp_path / "ck", source_url=src,
                       available_now=True, max_events_per_batch=LINES, trim_source=True)
    assert [b.events for b in again.batches] == [len(history) - cut]
    assert _ids(client, "events") == [first[-1]] + rest
    assert again.totals["events"] == sum(b.events for b in reference.report.batches)
    # the same state as one run over a directory of the same events, batch for batch
    assert_same_store(dump(redis_url), reference.state, plan)
    redis.Redis.from_url(redis_url).flushdb()
    client.flushdb()


def test_stream_trimmed_past_the_checkpoint_stops_unless_skip_trimmed(spark, plan, redis_url, tmp_path):
    src, client = _source(redis_url, 4)
    events = _logins(60, 5)
    first = _append(client, "events", events[:20])
    run_stream(spark, plan, redis_url, "redis:events", tmp_path / "ck", source_url=src, available_now=True)
    # the job has read up to first[-1]; a producer's trim (MAXLEN) drops it and 5 entries written after it
    lost = _append(client, "events", events[20:25])
    kept = _append(client, "events", events[25:])
    client.xtrim("events", minid=kept[0], approximate=False)
    assert _ids(client, "events") == kept and entry_seq(lost[-1]) < entry_seq(kept[0])
    with pytest.raises(StreamError) as err:
        run_stream(spark, plan, redis_url, "redis:events", tmp_path / "ck", source_url=src, available_now=True)
    text = str(err.value)
    assert text.startswith("the Redis stream 'events' no longer holds entry " + first[-1]), text
    assert f"its first entry is now {kept[0]}" in text and "--skip-trimmed" in text and "\n" not in text
    # nothing was applied by the refused run; --skip-trimmed goes on with what is left
    report = run_stream(spark, plan, redis_url, "redis:events", tmp_path / "ck", source_url=src,
                        available_now=True, skip_trimmed=True)
    assert [b.events for b in report.batches] == [len(kept)]
    assert report.totals["events"] == 20 + len(kept)
    # without a trim past it, the next run checks the entry it stopped at and finds it
    _append(client, "events", events[:3])
    report = run_stream(spark, plan, redis_url, "redis:events", tmp_path / "ck", source_url=src, available_now=True)
    assert [b.events for b in report.batches] == [3]
    redis.Redis.from_url(redis_url).flushdb()
    client.flushdb()


def test_trim_source_deletes_the_files_of_committed_batches(spark, plan, redis_url, reference, tmp_path):
    in_dir = tmp_path / "in"
    shutil.copytree(reference.in_dir, in_dir)
    for p in in_dir.iterdir():  # keep the reference's file order (oldest first)
        st = os.stat(reference.in_dir / p.name)
        os.utime(p, (st.st_atime, st.st_mtime))
    redis.Redis.from_url(redis_url).flushdb()
    report = run_stream(spark, plan, redis_url, f"dir:{in_dir}", tmp_path / "ck", available_now=True,
                        max_files_per_trigger=1, trim_source=True)
    assert [b.events for b in report.batches] == [b.events for b in reference.report.batches]
    assert all(b.behind_ms is None for b in report.batches)  # a dir: source has no lag to tell
    # the files of the batches committed before the last are deleted; the last batch's file waits for the next
    assert sorted(p.name for p in in_dir.iterdir()) == ["part-2.jsonl"]
    assert_same_store(dump(redis_url), reference.state, plan)
    redis.Redis.from_url(redis_url).flushdb()


def test_cli_refuses_skip_trimmed_on_a_directory(tmp_path):
    topo = tmp_path / "topo"
    topo.mkdir()
    (topo / "t.scowl").write_text(TOPOLOGY)
    env = {**os.environ, "SCOWL_REDIS_URL": "redis://127.0.0.1:1/0", "SCOWL_HOME": str(tmp_path / "home")}
    p = _scowl(["stream", str(topo), "--source", f"dir:{tmp_path}", "--skip-trimmed"], env)
    out, _ = p.communicate(timeout=60)
    assert p.returncode == 1, out
    assert "--skip-trimmed applies to a redis: source only" in " ".join(out.split()) and "Traceback" not in out


def test_cli_on_a_stream_trimmed_past_its_checkpoint_says_so_in_one_line(spark, plan, redis_url, tmp_path):
    src, client = _source(redis_url, 6)
    events = _logins(40, 9)
    first = _append(client, "events", events[:10])
    run_stream(spark, plan, db_url(redis_url, 7), "redis:events", tmp_path / "ck", source_url=src, available_now=True)
    _append(client, "events", events[10:])
    client.xtrim("events", maxlen=3, approximate=False)
    topo = tmp_path / "topo"
    topo.mkdir()
    (topo / "t.scowl").write_text(TOPOLOGY)
    env = {**os.environ, "SCOWL_REDIS_URL": db_url(redis_url, 7), "SCOWL_HOME": str(tmp_path / "home"),
           "SCOWL_SPARK_MASTER": "local[1]"}
    p = _scowl(["stream", str(topo), "--source", "redis:events", "--source-url", src,
                "--checkpoint", str(tmp_path / "ck"), "--available-now"], env)
    out, _ = p.communicate(timeout=300)
    assert p.returncode == 1, out
    lines = [line for line in out.splitlines() if line.strip()]
    assert lines[0].startswith("stream redis:events -> store "), out
    assert len(lines) == 2 and lines[1].startswith(f"error: the Redis stream 'events' no longer holds entry {first[-1]}"), out
    assert "Traceback" not in out and " ERROR " not in out, out
    redis.Redis.from_url(db_url(redis_url, 7)).flushdb()
    client.flushdb()


def test_reader_options_trim_and_lost_entries(redis_url, tmp_path):
    src, client = _source(redis_url, 8)
    ids = _append(client, "s", [{"_type": "login", "i": i} for i in range(6)])
    base = {"url": src, "stream": "s"}
    with pytest.raises(ValueError, match="trim must be true or false"):
        RedisStreamReader({**base, "trim": "yes"})
    # without trim, commit keeps everything; with it, every entry before the committed end goes
    RedisStreamReader(base).commit({"id": ids[2]})
    assert _ids(client, "s") == ids
    trimming = RedisStreamReader({**base, "trim": "TRUE"})
    trimming.commit({"id": "0-0"})
    assert _ids(client, "s") == ids
    trimming.commit({"id": ids[2]})
    assert _ids(client, "s") == ids[2:]
    assert trimming.latestOffset({"id": ids[2]}) == {"id": ids[-1]}
    # the last entry read is gone: an error, a file and no new entries, or (failOnDataLoss off) the rest
    client.xtrim("s", minid=ids[4], approximate=False)
    with pytest.raises(TrimmedPastCheckpoint, match=f"no longer holds entry {ids[2]}.*first entry is now {ids[4]}"):
        RedisStreamReader(base).latestOffset({"id": ids[2]})
    loss = tmp_path / "loss.txt"
    assert RedisStreamReader({**base, "lossFile": str(loss)}).latestOffset({"id": ids[2]}) == {"id": ids[2]}
    assert loss.read_text().startswith(f"the Redis stream 's' no longer holds entry {ids[2]}")
    lenient = RedisStreamReader({**base, "failOnDataLoss": "false"})
    assert lenient.latestOffset({"id": ids[2]}) == {"id": ids[-1]}
    assert [row[0] for row in lenient.read(lenient.partitions({"id": ids[2]}, {"id": ids[-1]})[0])] == ids[4:]
    # the starting offset is not an entry the job read: nothing to check there
    assert RedisStreamReader({**base, "startingId": ids[1]}).latestOffset({"id": ids[1]}) == {"id": ids[-1]}
    client.flushdb()


def test_each_redis_batch_says_how_far_behind_the_stream_it_is(spark, plan, redis_url, tmp_path):
    """``BatchResult.behind_ms``: the append time of the stream's last entry less that of the batch's last
    (entry ids ``<ms>-<n>``): 30 entries a second apart, batches of 10, are 20 s, 10 s and 0 s behind; a
    ``dir:`` batch has none; an empty or missing stream gives ``None``."""
    from writer.redis_source import behind_ms

    src, client = _source(redis_url, 9)
    assert behind_ms(src, "events", entry_seq("5-0")) is None
    events = _logins(80, 12)[:30]
    base = 1_800_000_000_000
    for i, e in enumerate(events):
        client.xadd("events", {"event": orjson.dumps(e)}, id=f"{base + i * 1000}-0")
    report = run_stream(spark, plan, redis_url, "redis:events", tmp_path / "ck", source_url=src,
                        available_now=True, max_events_per_batch=10)
    assert [b.behind_ms for b in report.batches] == [20_000, 10_000, 0]
    redis.Redis.from_url(redis_url).flushdb()
    client.flushdb()


def test_reader_keeps_one_connection_across_chunks_and_tasks_get_none(redis_url):
    """A batch of 2,500 entries is read in ``CHUNK`` pieces over one connection (each chunk opened its own); the
    reader as pickled for a task carries no client; an outage drops the client, so the retry connects afresh."""
    import pickle

    from writer import redis_source

    src, client = _source(redis_url, 10)
    ids = _append(client, "s", [{"_type": "login", "i": i} for i in range(2500)])
    reader = RedisStreamReader({"url": src, "stream": "s"})
    end = reader.latestOffset({"id": "0-0"})  # connects (and asks once per process whether it is a cluster)
    before = client.info("stats")["total_connections_received"]
    rows = list(reader.read(reader.partitions({"id": "0-0"}, end)[0]))
    assert [r[0] for r in rows] == ids and redis_source.CHUNK < 2500
    assert client.info("stats")["total_connections_received"] == before  # the same connection again
    assert pickle.loads(pickle.dumps(reader))._redis is None and reader._redis is not None
    # an outage: the client is closed and dropped (the next call makes a new one); another error keeps it
    kept = reader._redis
    with pytest.raises(ValueError):
        reader._with_store(lambda c: (_ for _ in ()).throw(ValueError("not an outage")))
    assert reader._redis is kept
    with pytest.raises(redis.ConnectionError):
        reader._with_store(lambda c: (_ for _ in ()).throw(redis.ConnectionError("gone")))
    assert reader._redis is None
    assert reader.latestOffset(end) == end
    client.flushdb()
