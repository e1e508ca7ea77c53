"""The jobs run unchanged on a Spark standalone cluster (``--master spark://…``; SPEC §5.9, issue item 5).

A master and one worker (1 core) are started on loopback with pyspark's
``spark-class``; ``scowl backfill`` and ``scowl replay`` run as subprocesses
with ``--master spark://127.0.0.1:<port>`` (client mode: executors on the
worker run this interpreter and import the installed packages). The store
must equal a local-mode backfill key by key, and the training set a
local-mode replay row by row. Master and worker are killed in any case.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from contextlib import contextmanager
from pathlib import Path

import pyspark
import pytest

from compiler import compile_sources
from scowl.embedded import free_port
from tests.cli.test_cli import ROOT
from tests.e2e.helpers import close
from tests.e2e.store_dump import assert_same_store, db_url, dump_store
from tests.e2e.test_backfill_auto import cli_env, make_events, write_jsonl
from writer.backfill import run_backfill

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"

TOPOLOGY = """
event login
user := $.user as string
ip := $.ip as string?
amount := $.amount as float?
n_user := Count(by user last 7 days)
avg_user := Average(amount by user)
seq := Sequence(ip by user limit 3)
busy_ip := Count(by ip where n_user > 20 last 7 days)
"""


def _stop(proc: subprocess.Popen) -> None:
    """Stop a process started in its own session, and its children: SIGTERM, then SIGKILL."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


def _alive_workers(ui_port: int) -> int:
    """The ALIVE workers the master at web UI port ``ui_port`` lists; -1 while it is not up and ALIVE itself.

    A master that has bound its UI but is not yet elected leader answers ``/json/`` with its HTML page
    (seen under load on 2026-12-01), so a body that is not JSON counts as not up yet.
    """
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{ui_port}/json/", timeout=5) as r:
            doc = json.load(r)
    except (OSError, ValueError):
        return -1
    if not isinstance(doc, dict) or doc.get("status") != "ALIVE":
        return -1
    return sum(1 for w in doc.get("workers", []) if w.get("state") == "ALIVE")


@contextmanager
def standalone_cluster(tmp_path: Path):
    """Yield ``spark://127.0.0.1:<port>`` of a master with one registered worker; both stopped on exit."""
    port, ui, worker_ui = free_port(), free_port(), free_port()
    (tmp_path / "work").mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOG_DIR": str(tmp_path / "logs"),
           "SPARK_WORKER_DIR": str(tmp_path / "work")}
    procs: list[subprocess.Popen] = []
    try:
        with open(tmp_path / "master.log", "w") as log:
            procs.append(subprocess.Popen(
                [str(SPARK_CLASS), "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
                 "--port", str(port), "--webui-port", str(ui)],
                env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True))
        deadline = time.monotonic() + 180
        while _alive_workers(ui) < 0:
            assert procs[0].poll() is None, (tmp_path / "master.log").read_text()
            assert time.monotonic() < deadline, "the master did not start"
            time.sleep(0.5)
        master = f"spark://127.0.0.1:{port}"
        with open(tmp_path / "worker.log", "w") as log:
            procs.append(subprocess.Popen(
                [str(SPARK_CLASS), "org.apache.spark.deploy.worker.Worker", master, "--host", "127.0.0.1",
                 "--cores", "1", "--memory", "2g", "--webui-port", str(worker_ui), "--work-dir", str(tmp_path / "work")],
                env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True))
        while _alive_workers(ui) < 1:
            assert procs[1].poll() is None, (tmp_path / "worker.log").read_text()
            assert time.monotonic() < deadline, "no worker registered"
            time.sleep(0.5)
        yield master
    finally:
        for p in reversed(procs):
            _stop(p)


def _rows(spark, path: Path) -> list[dict]:
    return [r.asDict(recursive=True) for r in spark.read.parquet(str(path)).orderBy("_seq").collect()]


@pytest.mark.skipif(not SPARK_CLASS.exists(), reason="pyspark ships no spark-class")
def test_backfill_and_replay_on_a_standalone_cluster(spark, redis_url, tmp_path):
    plan = compile_sources({"t.scowl": TOPOLOGY}).plan
    topo = tmp_path / "topo"
    topo.mkdir()
    (topo / "t.scowl").write_text(TOPOLOGY)
    path = tmp_path / "e.jsonl"
    write_jsonl(path, make_events(600, seed=9))
    cluster_url = db_url(redis_url, 4)
    env = cli_env(cluster_url, tmp_path / "home")

    with standalone_cluster(tmp_path / "cluster") as master:
        r = subprocess.run([sys.executable, "-m", "scowl", "backfill", str(topo), "--events", str(path),
                            "--master", master], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stdout + r.stderr
        assert "backfilled [" in r.stdout
        r = subprocess.run([sys.executable, "-m", "scowl", "replay", str(topo), "--events", str(path),
                            "--out", str(tmp_path / "replay-cluster"), "--master", master],
                           cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stdout + r.stderr
        executors = list((tmp_path / "cluster" / "work").glob("app-*/*"))
        assert executors, "no executor ran on the worker"

    local_url = db_url(redis_url, 5)
    run_backfill(spark, plan, [path], local_url)
    on_cluster, local = dump_store(cluster_url), dump_store(local_url)
    assert len(local) > 2 * len(plan.states)
    assert_same_store(on_cluster, local, plan)

    from writer.replay import run_replay

    run_replay(spark, plan, [path], tmp_path / "replay-local")
    got, want = _rows(spark, tmp_path / "replay-cluster" / "login"), _rows(spark, tmp_path / "replay-local" / "login")
    assert len(want) == 600 and [r["_seq"] for r in got] == list(range(600))
    bad = [(a, b) for a, b in zip(got, want) if not close(a, b)]
    assert len(got) == len(want) and not bad, bad[:3]
    assert max(r["n_user"] for r in want) > 20 and any(r["busy_ip"] for r in want)
