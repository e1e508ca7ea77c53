"""The read-only mode (issue 13): ``POST /event?dry_run`` answers what the event would get now and stores nothing.

A dry run's script writes the event's own contribution, reads, and puts every
key it wrote back (``DUMP``/``RESTORE`` in the same atomic call,
``compiler.algebra.lua.RoundSpec.dry``). Checked here, on one node and on a
3-master cluster, for every function, ``exclusive``, ``after``, filters,
cross-event scopes, an aggregate keyed by another aggregate (a second
round that reads a state the first round wrote) and late events:

* before each real event, its dry run answers exactly what the real event
  then answers;
* after every dry run the store is the same, key for key (values, types,
  and no expiry moved later);
* no ``_id`` marker, no event-stream entry, no online-start record; dry runs
  are counted in ``scowl_dry_runs_total``, not in ``scowl_events_total``;
* ``?explain`` gives the window each aggregate counted and the writes
  counted where its state keeps that count.
"""

from __future__ import annotations

import pytest
import redis
from fastapi.testclient import TestClient

from serving.app import create_app
from serving.metrics import REGISTRY
from serving.settings import Settings
from tests.e2e.helpers import (LOGIN_EVERY_FUNCTION, PURCHASE_AGGREGATES, displaced, login_purchase_events,
                               login_purchase_topology)
from tests.e2e.store_dump import dump_store
from writer.redisio import is_cluster
from tests.serving.helpers import client_for, compile_text

TOPOLOGY = login_purchase_topology(LOGIN_EVERY_FUNCTION + """
mirror := Latest(user by user last 1 hour)
again := Count(by mirror as user last 1 hour)
staged := Sum(amount by n_user last 1 day)
""", PURCHASE_AGGREGATES)
T0 = 1_700_000_000_000


def _image(url: str) -> dict:
    """Every key's image (``tests.e2e.store_dump``), expiries left out (they only count down)."""
    return dump_store(url)


def _metric(name: str, event_type: str) -> float:
    return REGISTRY.get_sample_value(name, {"event_type": event_type}) or 0.0


def _keys_and_ttls(url: str) -> dict[bytes, int]:
    """Every key (on every node) with its PTTL in ms (-1: none)."""
    out: dict[bytes, int] = {}
    nodes = [redis.Redis.from_url(url)]
    if is_cluster(url):
        c = redis.RedisCluster.from_url(url)
        nodes = [c.get_redis_connection(n) for n in c.get_primaries()]
    for node in nodes:
        for k in node.scan_iter(count=1000):
            out[k] = node.pttl(k)
    return out


def test_a_dry_run_answers_what_the_event_then_gets_and_stores_nothing(store_url):
    events = login_purchase_events(70, seed=13, start_ms=T0, n_users=6, n_ips=4)
    events = displaced(events, seed=5, lateness_ms=1_800_000)  # late events too (SPEC §3.3)
    with client_for(TOPOLOGY, store_url) as c:
        for i, ev in enumerate(events):
            before, ttls = _image(store_url), _keys_and_ttls(store_url)
            dry = c.post("/event?dry_run", json=ev)
            assert dry.status_code == 200, dry.text
            assert _image(store_url) == before, f"event {i}: the dry run changed the store"
            after = _keys_and_ttls(store_url)
            assert after.keys() == ttls.keys()
            assert all(after[k] <= ttls[k] for k in ttls), f"event {i}: a dry run moved an expiry"
            real = c.post("/event", json=ev)
            assert real.status_code == 200, real.text
            assert dry.json()["features"] == real.json()["features"], f"event {i}: {ev}"


def test_a_dry_run_sees_a_state_the_event_wrote_in_an_earlier_round(redis_url):
    """``again`` reads, in round 2, the state ``n_user`` wrote in round 1: the dry run must count the event itself."""
    with client_for(TOPOLOGY, redis_url) as c:
        ev = {"_type": "login", "_time": T0, "user": "solo", "ip": "10.1.1.1", "amount": 3.0}
        dry = c.post("/event?dry_run=true", json=ev).json()["features"]
        assert dry["n_user"] == 1 and dry["again"] == 1 and dry["staged"] == 3.0
        assert c.post("/event?dry_run=1", json=ev).json()["features"] == dry
        real = c.post("/event", json=ev).json()["features"]
        assert real == dry
        assert c.post("/event?dry_run", json={**ev, "_time": T0 + 1}).json()["features"]["again"] == 2


def test_a_dry_run_leaves_no_id_marker_stream_entry_or_online_start(redis_url):
    plan = compile_text(TOPOLOGY)
    store = redis.Redis.from_url(redis_url)
    app = create_app(plan, Settings(event_stream="sc-test-events"), redis_url=redis_url)
    ev = {"_type": "login", "_time": T0, "_id": "dry-1", "user": "u", "ip": "10.0.0.1", "amount": 5.0}
    events_before = _metric("scowl_events_total", "login")
    dry_before = _metric("scowl_dry_runs_total", "login")
    with TestClient(app) as c:
        for _ in range(3):
            r = c.post("/event?dry_run", json=ev)
            assert r.status_code == 200 and r.json()["event_id"] == "dry-1"
            assert r.json()["features"]["n_user"] == 1
        assert store.keys("*") == []  # no state, no sc:id:{dry-1}, no stream, no sc:online
        assert _metric("scowl_dry_runs_total", "login") == dry_before + 3
        assert _metric("scowl_events_total", "login") == events_before
        # the id was not taken: the real event is written once, then its retry is not
        assert c.post("/event", json=ev).json()["features"]["n_user"] == 1
        assert c.post("/event", json=ev).json()["features"]["n_user"] == 1
        assert c.post("/event", json={**ev, "_id": "other"}).json()["features"]["n_user"] == 2
        assert store.xlen("sc-test-events") == 2


def test_dry_run_on_the_framework_route_and_in_a_batch(redis_url):
    """The FastAPI route (``fast_path`` off) and ``/batch?dry_run`` behave as the fast path: values, nothing stored."""
    plan = compile_text(TOPOLOGY)
    app = create_app(plan, Settings(), redis_url=redis_url)
    app.fast_path = False
    events = login_purchase_events(12, seed=3, start_ms=T0)
    with TestClient(app) as c:
        r = c.post("/batch", json=events[:6])
        assert r.status_code == 200
        before = _image(redis_url)
        one = c.post("/event?dry_run", json=events[6]).json()
        many = c.post("/batch?dry_run", json=events[6:9])
        assert many.status_code == 200 and len(many.json()) == 3
        assert many.json()[0]["features"] == one["features"]
        assert _image(redis_url) == before
        # each event of a dry batch sees the store as it is, not the batch's earlier events
        for ev, resp in zip(events[6:9], many.json()):
            assert resp["features"] == c.post("/event?dry_run", json=ev).json()["features"]


@pytest.mark.parametrize("value", ["maybe", "2"])
def test_a_bad_dry_run_flag_is_a_400_and_writes_nothing(redis_url, value):
    with client_for(TOPOLOGY, redis_url) as c:
        ev = {"_type": "login", "_time": T0, "user": "u"}
        for path in ("/event", "/batch"):
            r = c.post(f"{path}?dry_run={value}", json=ev if path == "/event" else [ev])
            assert r.status_code == 400
            assert r.json()["error"]["code"] == "invalid-flag"
            assert "dry_run" in r.json()["error"]["message"]
        assert redis.Redis.from_url(redis_url).keys("*") == []


def test_explain_gives_each_aggregates_counted_window_and_writes(redis_url):
    with client_for(TOPOLOGY, redis_url) as c:
        for k in range(3):
            c.post("/event", json={"_type": "login", "_time": T0 + 1000 * k, "user": "a", "ip": "10.0.0.1",
                                   "amount": 2.0 * (k + 1)})
        t = T0 + 2500  # 2023-11-14T22:13:22.500Z
        r = c.post("/event?dry_run&explain", json={"_type": "login", "_time": t, "user": "a", "ip": None,
                                                   "amount": 4.0})
        assert r.status_code == 200, r.text
        body = r.json()
        ex = body["explain"]
        assert set(ex) == {f for f, v in body["features"].items() if f in ex}
        assert body["features"]["n_user"] == 4
        n = ex["n_user"]
        assert n["function"] == "Count" and n["key"] == ["a"] and n["writes"] == 4
        assert n["window"] == {"from": "2023-11-14T21:13:23.000Z", "to": "2023-11-14T22:13:22.500Z",
                               "resolution_s": 1}
        assert ex["avg_user"]["writes"] == 4 and ex["avg_user"]["window"]["from"] == "2023-11-14T22:03:23.000Z"
        assert ex["recent"]["writes"] == 3  # limit 3 of 3 writes with an ip (the dry event's ip is null)
        assert ex["sum_ip"] == {"function": "Sum", "state": ex["sum_ip"]["state"], "key": None, "window": None,
                                "writes": None}  # a null ip: nothing read
        assert ex["uniq"]["writes"] is None and ex["uniq"]["key"] == ["a"]  # CountUnique keeps no write count
        assert ex["n_all"]["key"] == []  # the global key
        assert ex["decayed"]["window"] == {"from": None, "to": "2023-11-14T22:13:22.500Z", "resolution_s": 1,
                                           "decay_s": 3600}  # all history, weighed
        # after prev (T0 + 2 s, at 1-minute resolution): from the next minute, after the event: nothing counts
        assert ex["since_prev"]["window"] == {"from": "2023-11-14T22:14:00.000Z", "to": "2023-11-14T22:13:22.500Z",
                                              "resolution_s": 60}
        assert body["features"]["since_prev"] == 0
        hashes = {f.name: f.aggregate.definition_hash
                  for f in compile_text(TOPOLOGY).events["login"].features if f.aggregate}
        assert all(ex[f]["state"] == hashes[f] for f in ex)
        # explain without dry_run: the event is written and explained
        r = c.post("/event?explain", json={"_type": "login", "_time": t, "user": "a"})
        assert r.json()["explain"]["n_user"]["writes"] == 4
        assert c.post("/event?dry_run", json={"_type": "login", "_time": t, "user": "a"}).json()["features"][
            "n_user"] == 5
        assert "explain" not in c.post("/event?dry_run", json={"_type": "login", "_time": t, "user": "b"}).json()
