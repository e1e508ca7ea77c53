"""Fault: a serving worker is SIGKILLed in the middle of a ``/batch``; every event stays atomic (issue 12).

Real processes: ``scowl serve examples/flights --workers 2`` over its
embedded store. A client posts batches of 200 departures, every event with
an ``_id``, on one keep-alive connection. Three times, while a batch is being
evaluated, the worker that accepted that connection is killed with
``SIGKILL``: the client sees the connection drop, reconnects (to the other
worker, or to the one uvicorn's supervisor starts in its place) and sends
the same batch again, as an at-least-once producer does. Checked:

* the kills landed mid-batch: some but not all of the batch's ids were
  recorded by the store when the worker died;
* no event is half-written and none is counted twice: the store equals a
  clean run of the same events on a fresh store (each event's reads and
  writes are one script call, and the retried ones are skipped by ``_id``);
* every acknowledged event is stored (the same comparison), and the events
  answered at their first attempt got the clean run's answers;
* ``scowl serve`` itself stays up and answers ``GET /ready``.
"""

from __future__ import annotations

import http.client
import json
import signal
import sys
import threading
import time

import pytest
import redis

from compiler import compile_dir
from compiler.algebra.storekeys import id_key
from scowl.embedded import free_port
from tests.cli.test_serve_workers import owner, workers
from tests.cli.test_signals import ROOT, Command, wait_for
from tests.e2e.helpers import post_all
from tests.e2e.store_dump import assert_same_store, db_url, dump_store, live_part

pytestmark = [pytest.mark.slow, pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")]

BATCH = 200
ORIGINS = ["JFK", "LGA", "EWR"]
TAILS = [f"N{i}" for i in range(12)]


def departures(n: int) -> list[dict]:
    """``n`` departures, one every 20 s from 2013-01-01 06:00, each with an ``_id``."""
    out = []
    t0 = 1_357_020_000_000
    for k in range(n):
        out.append({"_type": "departure", "_time": t0 + 20_000 * k, "_id": f"dep-{k}", "carrier": "UA",
                    "flight": k, "tailnum": TAILS[k % len(TAILS)], "origin": ORIGINS[k % 3],
                    "dest": ["LAX", "SFO", "ORD", "ATL"][k % 4], "dep_delay": float(k % 17 - 3),
                    "distance": 500 + 37 * (k % 40)})
    return out


def _send(conn: http.client.HTTPConnection, chunk: list[dict]) -> tuple[int, object]:
    conn.request("POST", "/batch", body=json.dumps(chunk), headers={"Content-Type": "application/json"})
    r = conn.getresponse()
    return r.status, json.loads(r.read())


def test_worker_killed_mid_batch(tmp_path, redis_url):
    port = free_port()
    events = departures(12 * BATCH)
    plan = compile_dir(ROOT / "examples" / "flights").plan
    cmd = Command(tmp_path, "serve", "examples/flights", "--workers", "2", "--port", str(port))
    with cmd:
        wait_for(lambda: len(workers(cmd.proc.pid)) == 2 or cmd.proc.poll() is not None, 60, "two workers")
        assert cmd.proc.poll() is None, cmd.err.read_text()
        store = redis.Redis.from_url(cmd.store_url())
        answers: dict[int, dict] = {}
        retried: set[int] = set()
        kills_at = {3 * BATCH, 6 * BATCH, 9 * BATCH}
        partial = 0
        conn = None
        i = 0
        while i < len(events):
            chunk = events[i:i + BATCH]
            if conn is None:
                conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
                wait_for(lambda: _connected(conn), 60, "a connection to serve")
            if i in kills_at:
                kills_at.discard(i)
                victim = wait_for(lambda: owner(port, conn.sock.getsockname()[1], workers(cmd.proc.pid)), 30,
                                  "the worker holding the connection")
                result: dict = {}
                sender = threading.Thread(target=lambda: result.update(_try(conn, chunk)))
                sender.start()
                # kill as soon as the batch is being written: its first id appears in the store (polled
                # every ms: a batch's 200 script calls take Valkey only some 30-50 ms)
                deadline = time.monotonic() + 30
                while not store.exists(id_key(chunk[0]["_id"])) and sender.is_alive():
                    assert time.monotonic() < deadline, "timed out waiting for the batch's first write"
                    time.sleep(0.001)
                os_kill(victim)
                sender.join(timeout=60)
                stored = sum(store.exists(id_key(e["_id"])) for e in chunk)
                partial += 0 < stored < len(chunk)
                conn.close()
                conn = None
                if result.get("status") != 200:
                    retried.update(range(i, i + len(chunk)))
                    continue  # the same events again, on a new connection
                feats = result["body"]
            else:
                status, body = _send(conn, chunk)
                assert status == 200, body
                feats = body
            for j, resp in enumerate(feats):
                answers[i + j] = resp["features"]
            i += BATCH
        assert partial >= 1, "no kill landed mid-batch"
        assert cmd.proc.poll() is None, cmd.err.read_text()
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        conn.request("GET", "/ready")
        assert conn.getresponse().status == 200
        conn.close()
        ours = dump_store(cmd.store_url())
        store.close()

    clean_url = db_url(redis_url, 1)
    clean = post_all(plan, clean_url, events)
    first = [k for k in range(len(events)) if k not in retried]
    assert len(retried) >= BATCH and len(first) > len(events) // 2
    assert [answers[k] for k in first] == [clean[k] for k in first]
    now = max(e["_time"] for e in events)
    ours = {k: v for k, v in ours.items() if not k.startswith(b"sc:cov")}
    assert_same_store(live_part(ours, plan, now), live_part(dump_store(clean_url), plan, now), plan)


def _connected(conn: http.client.HTTPConnection) -> bool:
    try:
        conn.connect()
        return True
    except OSError:
        time.sleep(0.1)
        return False


def _try(conn: http.client.HTTPConnection, chunk: list[dict]) -> dict:
    try:
        status, body = _send(conn, chunk)
        return {"status": status, "body": body}
    except (OSError, http.client.HTTPException) as e:
        return {"status": None, "error": repr(e)}


def os_kill(pid: int) -> None:
    import os

    os.kill(pid, signal.SIGKILL)
