"""What a command says when its store goes away under a Spark job, or a Python task fails (scowl.failures).

* a backfill whose store is shut down as its tiles phase starts fails with an error that
  :func:`store_failure` turns into one line naming the store's error (``scowl.cli.main`` prints it, exit 1,
  no traceback file), and no coverage is recorded for the run (``--store-retry 0``);
* with ``--store-retry``, a backfill whose connections to the store are cut as its tiles phase starts, and
  restored 3 s later (the same server process), waits, sends its writes again and finishes with the store
  of an uninterrupted run; one whose store restarts meanwhile (a new server process: what it had not
  persisted may be lost) stops with one line and records no coverage;
* any other failure of a Python task is summarised by the Python exception's own line, not by the first
  line of PySpark's message (``An exception was thrown from the Python worker: Traceback ...``);
* a job's progress bar that was cut short reads "(stopped)" with no spinner frame left beside it.
"""

from __future__ import annotations

import io

import orjson
import pytest
import redis
from rich.console import Console

from compiler.algebra.storekeys import COVERAGE_PREFIX
from scowl.failures import failure_summary, store_failure
from scowl.progress import job_progress
from tests.serving.helpers import compile_text
from tests.e2e.store_dump import assert_same_store, db_url, dump_store
from tests.store_server import StoreProxy, StoreServer
from writer.backfill import run_backfill
from writer.session import python_error_line

TOPOLOGY = """
event login
user := $.user as string
n_user := Count(by user last 1 hour)
"""


@pytest.mark.slow
def test_a_backfill_whose_store_goes_away_is_one_line_and_records_nothing(spark, tmp_path):
    server = StoreServer(tmp_path)
    server.start()
    events = tmp_path / "events.jsonl"
    _logins(events, 500)
    progress = at_tiles_start(server.kill)  # its append-only file: the restart below shows what the store held
    try:
        with pytest.raises(Exception) as failed:
            run_backfill(spark, compile_text(TOPOLOGY), [events], server.url, progress=progress, store_retry_s=0)
        message = store_failure(failed.value)
        assert message == (f"the store became unavailable (ConnectionError: Error 111 connecting to 127.0.0.1:"
                           f"{server.port}. Connection refused.): run the command again once it answers (a backfill "
                           "records no coverage for a run cut short, and its re-run overwrites what it wrote, "
                           "never adds)")
        server.start()
        client = redis.Redis.from_url(server.url)
        assert not list(client.scan_iter(COVERAGE_PREFIX + "*"))  # no coverage claim for the run cut short
        # the same run against a store that stays up records it (the check above can fail)
        run_backfill(spark, compile_text(TOPOLOGY), [events], server.url)
        assert len(list(client.scan_iter(COVERAGE_PREFIX + "*"))) == 1
    finally:
        server.stop()


def at_tiles_start(*actions):
    """A ``run_backfill`` progress callback that calls each of ``actions`` as the tiles phase starts (the store
    has been read, nothing written yet)."""
    def progress(phase: str, done: int, total: int) -> None:
        if phase == "tiles" and done == 0:
            for action in actions:
                action()
    return progress


def _logins(path, n: int) -> None:
    path.write_bytes(b"".join(orjson.dumps({"_type": "login", "_time": 1_700_000_000_000 + 1000 * i,
                                            "user": f"u{i % 7}"}) + b"\n" for i in range(n)))


@pytest.mark.slow
def test_a_backfill_waits_out_a_lost_connection_and_writes_what_an_uninterrupted_run_does(spark, tmp_path):
    import threading

    server = StoreServer(tmp_path)
    server.start()
    proxy = StoreProxy(server.port)
    events = tmp_path / "events.jsonl"
    _logins(events, 3000)
    plan = compile_text(TOPOLOGY)
    restored = threading.Timer(3.0, proxy.restore)
    progress = at_tiles_start(proxy.cut, restored.start)  # the store runs on: the same run_id when it is back
    try:
        report = run_backfill(spark, plan, [events], proxy.url, progress=progress, store_retry_s=60)
        assert restored.finished.is_set()
        assert report.seconds["tiles"] >= 3.0  # the writes waited for the connections to come back
        assert sum(report.rows.values()) > 0
        reference = db_url(server.url, 1)
        run_backfill(spark, plan, [events], reference)
        assert_same_store(dump_store(server.url), dump_store(reference), plan)  # coverage recorded in both
        assert len(list(redis.Redis.from_url(server.url).scan_iter(COVERAGE_PREFIX + "*"))) == 1
    finally:
        restored.cancel()
        proxy.close()
        server.stop()


@pytest.mark.slow
def test_a_backfill_whose_store_restarts_under_it_stops_with_one_line(spark, tmp_path):
    import threading

    server = StoreServer(tmp_path)
    server.start()
    events = tmp_path / "events.jsonl"
    _logins(events, 500)
    started = threading.Timer(2.0, server.start)
    progress = at_tiles_start(server.kill, started.start)  # nothing acknowledged is lost, but the job cannot know
    try:
        with pytest.raises(Exception) as failed:
            run_backfill(spark, compile_text(TOPOLOGY), [events], server.url, progress=progress, store_retry_s=60)
        assert store_failure(failed.value) == (
            "the store restarted under the job (a new server process answers), so the run stopped: what the store "
            "had not persisted of the run's writes may be lost; run the command again (a backfill records no "
            "coverage for a run cut short, and its re-run overwrites what it wrote, never adds)")
        started.join()
        assert not list(redis.Redis.from_url(server.url).scan_iter(COVERAGE_PREFIX + "*"))
    finally:
        started.cancel()
        server.stop()


@pytest.mark.slow
def test_a_backfill_into_a_full_store_is_one_line(spark, tmp_path):
    server = StoreServer(tmp_path)
    server.start()
    client = redis.Redis.from_url(server.url)
    client.config_set("maxmemory-policy", "noeviction")
    client.config_set("maxmemory", str(client.info("memory")["used_memory"] + 10_000))
    events = tmp_path / "events.jsonl"
    events.write_bytes(b"".join(orjson.dumps({"_type": "login", "_time": 1_700_000_000_000 + 1000 * i,
                                              "user": f"u{i}"}) + b"\n" for i in range(3000)))
    try:
        with pytest.raises(Exception) as failed:
            run_backfill(spark, compile_text(TOPOLOGY), [events], server.url)
        assert store_failure(failed.value) == (
            "the store is out of memory (its maxmemory, with noeviction: it refuses writes rather than evict "
            "state): give it more memory, then run the command again (a backfill records no coverage for a run "
            "cut short, and its re-run overwrites what it wrote, never adds)")
        assert store_failure(redis.exceptions.OutOfMemoryError("command not allowed")) is not None
        assert store_failure(redis.ResponseError("ERR unknown command")) is None
    finally:
        server.stop()


def test_a_failed_python_task_is_summarised_by_its_exception(spark):
    def broken(batches):
        raise ValueError("bad value 42\nsecond line")
        yield from batches

    with pytest.raises(Exception) as failed:
        spark.range(1).mapInArrow(broken, "id long").collect()
    assert failure_summary(failed.value) == "Spark failed: a Python task raised ValueError: bad value 42"
    assert store_failure(failed.value) is None
    # scowl stream names a failed batch's cause the same way (writer.stream.run_stream's error)
    from writer.stream import _error_line

    assert _error_line(failed.value) == "a Python task raised ValueError: bad value 42"
    assert _error_line(RuntimeError("plain\nsecond")) == "RuntimeError: plain"


def test_python_error_line():
    text = ("[PYTHON_EXCEPTION] An exception was thrown from the Python worker: Traceback (most recent call last):\n"
            '  File "a.py", line 1, in f\n    g()\nKeyError: \'x\'\n\nDuring handling of the above exception, another '
            'exception occurred:\n\nTraceback (most recent call last):\n  File "b.py", line 2, in h\n'
            "    raise redis.exceptions.ConnectionError('gone')\nredis.exceptions.ConnectionError: gone\n  SQLSTATE: 38000")
    assert python_error_line(text) == "redis.exceptions.ConnectionError: gone"
    assert python_error_line("java.io.IOException: Mkdirs failed") is None


def test_a_stopped_phase_keeps_no_spinner():
    out = io.StringIO()
    console = Console(file=out, force_terminal=True, width=100, color_system=None)
    with pytest.raises(RuntimeError):
        with job_progress(console) as prog:
            done = prog.add_task("reading events", total=1)
            prog.update(done, completed=1)
            running = prog.add_task("tiles per aggregate state", total=5)
            prog.update(running, completed=2)
            raise RuntimeError("the job failed")
    stopped = [x for x in out.getvalue().splitlines() if "tiles per aggregate state (stopped)" in x]
    assert stopped, out.getvalue()
    assert stopped[-1].startswith("  tiles per aggregate state (stopped)"), stopped[-1]  # a blank, no frame


def test_store_identity_names_every_primary_and_a_changed_one_is_a_restart(redis_url, redis_cluster):
    """``writer.redisio.store_identity``: a standalone store's ``run_id``, a cluster's ``host:port=run_id`` per
    primary; ``WriteRetry.check`` passes on the same store and raises ``StoreRestarted`` on another identity."""
    from writer.redisio import StoreRestarted, WriteRetry, connect, store_identity

    one = store_identity(connect(redis_url))
    assert len(one) == 1 and len(one[0]) == 40
    nodes = store_identity(connect(redis_cluster.url))
    assert len(nodes) == redis_cluster.masters and all(len(n.split("=")[1]) == 40 for n in nodes)
    client = connect(redis_cluster.url)
    WriteRetry(0, nodes).check(client)
    with pytest.raises(StoreRestarted, match="the store restarted under the job"):
        WriteRetry(0, nodes[:-1] + (nodes[-1][:-1] + "x",)).check(client)


def test_store_watch_says_once_when_the_store_stops_answering_and_once_when_it_answers_again(tmp_path):
    """``writer.backfill.StoreWatch``: a line when the store stops answering (not one per ask, nor one per waiting
    task), a line when it answers again, nothing while it answers."""
    import re
    import time

    from writer.backfill import StoreWatch

    server = StoreServer(tmp_path)
    server.start()
    proxy = StoreProxy(server.port)
    said: list[str] = []
    watch = StoreWatch(proxy.url, said.append, 300, interval_s=0.1)
    try:
        watch.start()
        time.sleep(0.5)
        assert said == []
        proxy.cut()
        time.sleep(1.5)  # ~15 asks while it is down
        assert len(said) == 1 and said[0].startswith("store unavailable (ConnectionError: ") and said[0].endswith(
            "): the writes wait for it, up to --store-retry 300s"), said
        proxy.restore()
        deadline = time.monotonic() + 10
        while len(said) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(said) == 2 and re.fullmatch(r"store answers again after \d+s", said[1]), said
        time.sleep(0.3)
        assert len(said) == 2
    finally:
        watch.stop()
        proxy.close()
        server.stop()
