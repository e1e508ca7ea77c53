"""A store that goes away under ``scowl stream`` (``run_stream(store_retry_s=...)``, ``writer.redisio.store_outage``).

The store is a server of the test's own (``tests.store_server``), on a
fixed port, killed between two micro-batches, then started again on the
same port from its append-only file (what a restart or a failover looks
like to the job):

* with the default ``store_retry_s`` the batch that meets the outage runs
  again once the store answers, and the state is exactly that of the
  uninterrupted reference run of ``test_stream.py`` (nothing merged twice,
  nothing lost: the store saved its data); each wait was announced with the
  store's error, and the batch says the store restarted (its ``run_id``);
* with ``store_retry_s=0`` the job stops at once with one message naming
  the store's error, and a restart with the same checkpoint, once the store
  is back, leaves the reference state;
* a stop request while a batch waits ends the wait (one retry, not more);
* a Spark task that cannot reach the store fails its job with a text that
  :func:`store_outage` reads as that outage, and another task failure is
  not one.

Source: SPEC §5.7 (exactly-once effect per micro-batch across restarts).
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import redis

from scowl.embedded import free_port
from tests.e2e.store_dump import assert_same_store
from tests.store_server import StoreServer
from tests.stream.test_stream import dump, plan, reference  # noqa: F401  (module fixtures)
from writer.redisio import store_outage
from writer.stream import StreamError, run_stream

pytestmark = pytest.mark.slow


@pytest.fixture
def server(tmp_path):
    s = StoreServer(tmp_path)
    s.start()
    yield s
    s.stop()


def _source(reference, tmp_path: Path) -> str:  # noqa: F811 - the fixture's value
    in_dir = tmp_path / "in"
    shutil.copytree(reference.in_dir, in_dir)  # keeps the files' times: Spark takes them oldest first
    return f"dir:{in_dir}"


def test_a_batch_waits_out_a_store_restart_and_merges_once(spark, plan, reference, server, tmp_path):  # noqa: F811
    retries = []

    def on_batch(b) -> None:
        if b.batch_id == 0:
            server.kill()  # between batch 0 and batch 1 (its append-only file keeps every write)

    def on_retry(r) -> None:
        retries.append(r)
        if r.attempt == 2:
            server.start()

    report = run_stream(spark, plan, server.url, _source(reference, tmp_path), tmp_path / "ck", available_now=True,
                        max_files_per_trigger=1, on_batch=on_batch, on_retry=on_retry)
    assert [b.batch_id for b in report.batches] == [0, 1, 2]
    assert [b.retries for b in report.batches] == [0, 2, 0]
    assert [b.store_restarted for b in report.batches] == [False, True, False]  # a new server process (run_id)
    assert not any(b.rerun for b in report.batches)  # a retry in the same run is no restart
    assert [(r.batch_id, r.attempt, r.wait_s) for r in retries] == [(1, 1, 1.0), (1, 2, 2.0)]
    assert all(r.error.startswith("ConnectionError: ") and str(server.port) in r.error for r in retries), retries
    assert all(r.budget_s == 300 for r in retries) and retries[0].waited_s <= retries[1].waited_s
    assert [b.events for b in report.batches] == [b.events for b in reference.report.batches]
    assert_same_store(dump(server.url), reference.state, plan)  # float sums to 1e-9 (Spark's summation order)


def test_without_retries_the_job_stops_and_a_restart_finishes_it(spark, plan, reference, server, tmp_path):  # noqa: F811
    source = _source(reference, tmp_path)
    with pytest.raises(StreamError) as err:
        run_stream(spark, plan, server.url, source, tmp_path / "ck", available_now=True, max_files_per_trigger=1,
                   on_batch=lambda b: server.kill() if b.batch_id == 0 else None, store_retry_s=0)
    message = str(err.value)
    assert message.startswith("the stream stopped: the store was unavailable (--store-retry 0): ConnectionError: ")
    assert message.endswith("; restart with the same --checkpoint once it answers (nothing is merged twice)")
    assert "\n" not in message and "Traceback" not in message
    server.start()
    again = run_stream(spark, plan, server.url, source, tmp_path / "ck", available_now=True, max_files_per_trigger=1)
    assert [b.batch_id for b in again.batches] == [1, 2]
    assert again.totals == reference.report.totals
    assert_same_store(dump(server.url), reference.state, plan)


def test_a_stop_request_ends_the_wait(spark, plan, reference, server, tmp_path):  # noqa: F811
    retries = []
    report = run_stream(spark, plan, server.url, _source(reference, tmp_path), tmp_path / "ck",
                        max_files_per_trigger=1, trigger_s=0.2,
                        on_batch=lambda b: server.kill() if b.batch_id == 0 else None,
                        on_retry=retries.append, stop_requested=lambda: bool(retries))
    assert [b.batch_id for b in report.batches] == [0]
    assert [r.attempt for r in retries] == [1]  # the stop came during the first wait: no second retry


def test_a_task_that_cannot_reach_the_store_reads_as_an_outage(spark):
    port = free_port()

    def reach(batches, port=port):
        import redis as r

        r.Redis(port=port, socket_connect_timeout=2).ping()
        yield from batches

    def broken(batches):
        raise ValueError("not the store")
        yield from batches

    with pytest.raises(Exception) as unreachable:
        spark.range(1).mapInArrow(reach, "id long").collect()
    assert store_outage(unreachable.value) == f"ConnectionError: Error 111 connecting to localhost:{port}. " \
                                              "Connection refused."
    with pytest.raises(Exception) as other:
        spark.range(1).mapInArrow(broken, "id long").collect()
    assert store_outage(other.value) is None
    assert store_outage(redis.ResponseError("OOM command not allowed when used memory > 'maxmemory'.")) is None
    assert store_outage(redis.ReadOnlyError("You can't write against a read only replica.")) == \
        "ReadOnlyError: You can't write against a read only replica."


def test_the_redis_source_waits_out_its_store(server, caplog):
    import threading

    from writer.redis_source import RedisRange, RedisStreamReader

    client = redis.Redis.from_url(server.url)
    ids = [client.xadd("ev", {"event": f'{{"_type": "login", "n": {i}}}'}).decode() for i in range(3)]
    reader = RedisStreamReader({"url": server.url, "stream": "ev", "retryS": "60"})
    server.kill()
    threading.Timer(1.5, server.start).start()  # back while the reader waits
    with caplog.at_level("WARNING", logger="writer.redis_source"):
        assert reader.latestOffset({"id": "0-0"}) == {"id": ids[-1]}
    waits = [r.getMessage() for r in caplog.records]
    assert waits and all(m.startswith("source redis:ev: store unavailable (ConnectionError: ") for m in waits), waits
    assert waits[0].endswith("retry 1 in 1s (0s of --store-retry 60s spent)"), waits
    server.kill()
    threading.Timer(1.5, server.start).start()
    rows = list(reader.read(RedisRange("0-0", ids[-1])))
    assert [r[0] for r in rows] == ids and rows[0][2] == '{"_type": "login", "n": 0}'
    # without retryS the first store error is raised
    server.kill()
    with pytest.raises(redis.ConnectionError):
        RedisStreamReader({"url": server.url, "stream": "ev"}).latestOffset({"id": "0-0"})
    server.start()
    with pytest.raises(ValueError, match="retryS must be >= 0"):
        RedisStreamReader({"url": server.url, "stream": "ev", "retryS": "-1"})
    with pytest.raises(ValueError, match="retryS must be a number of seconds"):
        RedisStreamReader({"url": server.url, "stream": "ev", "retryS": "soon"})
