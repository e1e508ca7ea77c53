"""``scowl replay --events redis:KEY``: the training set of the events the API took, row for row what it answered.

The API, with ``SCOWL_EVENT_STREAM=ev``, takes a login/purchase timeline in
an arrival order where events are up to half an hour late (SPEC §3.3),
through ``POST /event`` and ``/batch``, with a repeated ``_id`` (answered,
not written, not appended). ``scowl replay DIR --events redis:ev`` (the CLI
in this process, the session's Spark) exports the stream to
``SCOWL_HOME/exports/`` (one line per entry, the stream's order) and writes
the training set: for every event the API wrote, the row holds the values
the API answered, by ``_id`` (floats to 1e-9 relative). A backfill from the
same stream gives the store a backfill of the events themselves gives.
A key the store does not hold, or one that is no stream, is one line, exit 1.

Source: SPEC §3.3 (arrival order), §4 (``_id``), §5.6, §5.8, README "stream".
"""

from __future__ import annotations

import os

import orjson
import pyarrow.parquet as pq
import pytest
import redis
from fastapi.testclient import TestClient
from typer.testing import CliRunner

from scowl import cli
from serving.app import create_app
from serving.settings import Settings
from tests.cli.test_cli import scowl
from tests.e2e.helpers import (LOGIN_EVERY_FUNCTION, PURCHASE_AGGREGATES, assert_values_equal, displaced,
                               login_purchase_events, login_purchase_topology)
from tests.e2e.store_dump import assert_same_store, db_url, dump_store
from tests.serving.helpers import compile_text
from writer.backfill import run_backfill

TOPOLOGY = login_purchase_topology(LOGIN_EVERY_FUNCTION, PURCHASE_AGGREGATES)
START_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z


def _cli(monkeypatch, url: str, home, *args: str):
    """``scowl ARGS`` in this process (Spark: the session's); returns the click result."""
    monkeypatch.setenv("SCOWL_REDIS_URL", url)
    monkeypatch.setenv("SCOWL_HOME", str(home))
    monkeypatch.setattr(cli.console, "width", 250)
    return CliRunner().invoke(cli.app, list(args))


def test_replay_of_the_api_event_stream_gives_what_the_api_answered(spark, redis_url, tmp_path, monkeypatch):
    plan = compile_text(TOPOLOGY)
    topo = tmp_path / "topo"
    topo.mkdir()
    (topo / "t.scowl").write_text(TOPOLOGY)
    events = login_purchase_events(500, seed=31, start_ms=START_MS)
    for i, e in enumerate(events):
        e["_id"] = f"e{i}"
    arrived = displaced(events, seed=4, lateness_ms=1_800_000)
    assert arrived != events
    url = db_url(redis_url, 11)
    redis.Redis.from_url(url).flushdb()
    app = create_app(plan, Settings(event_stream="ev"), redis_url=url)
    answers = {}
    with TestClient(app) as c:
        for e in arrived[:100]:
            r = c.post("/event", json=e)
            assert r.status_code == 200, r.text
            answers[e["_id"]] = r.json()["features"]
        r = c.post("/batch", content=orjson.dumps(arrived[100:] + [arrived[5]]),
                   headers={"content-type": "application/json"})
        assert r.status_code == 200, r.text
        for e, a in zip(arrived[100:], r.json()):
            answers[e["_id"]] = a["features"]
    assert redis.Redis.from_url(url).xlen("ev") == len(events)  # the repeated _id is not appended

    out = tmp_path / "training"
    result = _cli(monkeypatch, url, tmp_path / "home", "replay", str(topo), "--events", "redis:ev", "--out", str(out))
    assert result.exit_code == 0, result.output
    exports = list((tmp_path / "home" / "exports").glob("ev-*.jsonl"))
    assert len(exports) == 1
    assert f"exported {len(events)} entries of redis:ev (" in result.output and str(exports[0]) in result.output
    lines = exports[0].read_bytes().splitlines()
    assert [orjson.loads(x)["_id"] for x in lines] == [e["_id"] for e in arrived]  # arrival order

    for ev in ("login", "purchase"):
        rows = sorted(pq.read_table(out / ev).to_pylist(), key=lambda r: r["_seq"])
        names = [f.name for f in plan.events[ev].outputs]
        assert rows and all(r["_id"] in answers for r in rows)
        assert_values_equal([{k: r[k] for k in names} for r in rows],
                            [{k: answers[r["_id"]][k] for k in names} for r in rows], f"replay of redis:ev, {ev}")

    # a backfill from the stream gives the store a backfill of the same events from a file gives
    via_file = tmp_path / "events.jsonl"
    via_file.write_bytes(b"\n".join(orjson.dumps(e) for e in arrived) + b"\n")
    run_backfill(spark, plan, [via_file], db_url(redis_url, 12))  # the events' span
    src = redis.Redis.from_url(url)
    dst = redis.Redis.from_url(db_url(redis_url, 13))
    dst.flushdb()
    for eid, fields in src.xrange("ev"):  # the stream alone, in a store the API never wrote to
        dst.xadd("ev", fields, id=eid)
    result = _cli(monkeypatch, db_url(redis_url, 13), tmp_path / "home", "backfill", str(topo), "--events",
                  "redis:ev")
    assert result.exit_code == 0, result.output
    dst.delete("ev")
    assert_same_store(dump_store(db_url(redis_url, 13)), dump_store(db_url(redis_url, 12)), plan)
    for db in (11, 12, 13):
        redis.Redis.from_url(db_url(redis_url, db)).flushdb()


@pytest.mark.parametrize("setup, message", [
    (lambda c: None, "error: --events redis:nope: the store holds no key 'nope'"),
    (lambda c: c.set("nope", "x"), "error: --events redis:nope: 'nope' is not a Redis stream"),
])
def test_a_missing_key_or_one_that_is_no_stream_is_one_line(redis_url, tmp_path, setup, message):
    url = db_url(redis_url, 14)
    client = redis.Redis.from_url(url)
    client.flushdb()
    setup(client)
    (tmp_path / "t.scowl").write_text(TOPOLOGY)
    env = {**os.environ, "SCOWL_REDIS_URL": url, "SCOWL_HOME": str(tmp_path / "home")}
    r = scowl("replay", str(tmp_path), "--events", "redis:nope", "--out", str(tmp_path / "out"), env=env)
    assert r.returncode == 1 and r.stderr.startswith(message) and "Traceback" not in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    client.flushdb()
