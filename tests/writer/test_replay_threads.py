"""``writer.replay.as_completed_results``: the event types' datasets are written in driver threads."""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from writer.replay import as_completed_results


def test_results_come_as_each_call_finishes():
    release = threading.Event()

    def fn(x: str) -> str:
        if x == "slow":
            release.wait(5)
            time.sleep(0.5)  # well after the fast call has returned
        else:
            release.set()
        return x.upper()

    with ThreadPoolExecutor(2) as pool:
        assert list(as_completed_results(pool, fn, ["slow", "fast"])) == ["FAST", "SLOW"]


def test_first_error_is_raised_after_every_call_finished():
    finished: list[str] = []
    failing = threading.Event()

    def fn(x: str) -> str:
        if x == "bad":
            failing.set()
            raise ValueError("bad type")
        failing.wait(5)
        time.sleep(0.5)
        finished.append(x)
        return x

    with ThreadPoolExecutor(3) as pool:
        seen = []
        with pytest.raises(ValueError, match="bad type"):
            for r in as_completed_results(pool, fn, ["a", "bad", "b"]):
                seen.append(r)
    assert sorted(finished) == ["a", "b"]
    assert seen == []  # nothing is handed on once a call failed


def test_cancel_jobs_ends_the_tagged_jobs_of_another_thread(spark):
    """A stop during a replay cancels the jobs its driver threads run: they carry the replay's tag
    (``with_job_tags``), and ``cancel_jobs`` ends them at once."""
    import uuid

    from writer.session import cancel_jobs, with_job_tags

    tag = f"test-{uuid.uuid4().hex}"
    errors: list[BaseException] = []

    def long_job() -> None:
        try:  # minutes of work on 2 cores, unless cancelled
            spark.range(0, 10**12, numPartitions=2).selectExpr("sum(id % 7)").collect()
        except Exception as e:  # noqa: BLE001 - the cancellation is what the test looks for
            errors.append(e)

    sc = spark.sparkContext
    thread = threading.Thread(target=with_job_tags(long_job, [tag]))
    thread.start()
    deadline = time.time() + 60
    while not sc.statusTracker().getActiveJobsIds() and time.time() < deadline:
        time.sleep(0.1)
    assert tag not in sc.getJobTags()  # the tag is the other thread's only
    cancel_jobs(sc, tag)
    thread.join(60)
    assert not thread.is_alive()
    assert len(errors) == 1 and "CANCELLED" in str(errors[0]).upper()


def test_abandon_jobs_starts_no_queued_work_and_ends_the_running_jobs(spark):
    """After a failure or a stop (``abandon_jobs``, replay and backfill), work queued in the command's pool
    never starts and its running tagged job is cancelled, so the pool shuts down at once."""
    import uuid
    from concurrent.futures import ThreadPoolExecutor

    from writer.session import abandon_jobs, cancel_jobs, with_job_tags

    tag = f"test-{uuid.uuid4().hex}"
    started: list[str] = []

    def job(name: str) -> str:
        started.append(name)
        spark.range(0, 10**12, numPartitions=2).selectExpr("sum(id % 7)").collect()  # minutes, unless cancelled
        return name

    sc = spark.sparkContext
    pool = ThreadPoolExecutor(max_workers=1)
    running = pool.submit(with_job_tags(job, [tag]), "running")
    queued = pool.submit(with_job_tags(job, [tag]), "queued")
    deadline = time.time() + 60
    while not sc.statusTracker().getActiveJobsIds() and time.time() < deadline:
        time.sleep(0.1)
    try:
        abandon_jobs(pool, sc, tag)
        error = running.exception(timeout=60)  # a TimeoutError here: the running job was left to run
        assert queued.cancelled() and started == ["running"]
        assert "CANCELLED" in str(error).upper()
    finally:  # the shared session free for the next test, whatever happened
        pool.shutdown(wait=False, cancel_futures=True)
        cancel_jobs(sc, tag)
        pool.shutdown()
