"""A stop signal amid a Spark job (``writer.session.stop_spark_jobs``): the job is cancelled at once, and the
interrupted thread's next py4j calls read their own answers.

Real processes and real signals: each probe is a fresh Python process with its own Spark session (``local[1]``)
that sends itself SIGTERM while its main thread waits in a py4j call for a job of minutes.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

PROBE = """
import os, signal, sys, threading, time
from scowl.signals import Stopped, add_stop_hook, signals_stop
from writer.session import get_spark, stop_spark_jobs

spark = get_spark()
sc = spark.sparkContext
spark.conf.set("spark.sql.shuffle.partitions", "5")
if sys.argv[1] == "hook":
    add_stop_hook(stop_spark_jobs)
def stop_amid_the_job():  # SIGTERM once the job runs: a fixed delay could fall before it starts on a loaded host
    deadline = time.monotonic() + 120
    while not sc.statusTracker().getActiveJobsIds() and time.monotonic() < deadline:
        time.sleep(0.1)
    time.sleep(0.5)
    os.kill(os.getpid(), signal.SIGTERM)

with signals_stop():
    threading.Thread(target=stop_amid_the_job, daemon=True).start()
    t0 = time.monotonic()
    try:
        spark.range(0, 10 ** 13, 1, 1).selectExpr("sum(id)").collect()  # hours on one core
        print("NOT STOPPED", flush=True)
    except Stopped:
        print("STOPPED", flush=True)

def cancel_late():  # a guard against a hang: without the hook, the next call waits for the job's answer
    time.sleep(60)
    print("WATCHDOG", flush=True)
    sc.cancelAllJobs()

threading.Thread(target=cancel_late, daemon=True).start()
try:
    print("COUNT", spark.range(7).count(), flush=True)
    print("CONF", spark.conf.get("spark.sql.shuffle.partitions"), flush=True)
except Exception as e:
    print("ERROR", type(e).__name__, flush=True)
deadline = time.monotonic() + 60
while sc.statusTracker().getActiveJobsIds() and time.monotonic() < deadline:
    time.sleep(0.1)
print("ACTIVE", list(sc.statusTracker().getActiveJobsIds()), flush=True)
spark.stop()
"""


def _probe(mode: str) -> list[str]:
    """Run :data:`PROBE` in a fresh process (``mode``: ``hook``, or anything else for none); return its output lines."""
    env = {k: v for k, v in os.environ.items() if k != "SCOWL_JAVA_OPTIONS"}
    env["SCOWL_SPARK_MASTER"] = "local[1]"
    out = subprocess.run([sys.executable, "-c", PROBE, mode], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=400)
    assert out.returncode == 0, out.stderr[-3000:]
    return out.stdout.splitlines()


@pytest.mark.slow
def test_a_stop_signal_cancels_the_job_and_the_thread_reads_its_own_answers():
    lines = _probe("hook")
    assert lines[0] == "STOPPED"
    # the calls after the signal: their own answers, on a new connection, without waiting for the job
    assert lines[1:4] == ["COUNT 7", "CONF 5", "ACTIVE []"], lines
    assert "WATCHDOG" not in lines
    # (with mode "none", no hook: the probe's next call waits for the job and then reads shifted answers --
    # "py4j does not exist in the JVM" -- or the collect's; py4j frees a connection for KeyboardInterrupt only)
