"""Serving on a real 3-master Redis Cluster (SPEC §5.1, issue 12).

The cluster is ``scowl.embedded.LocalCluster``: three ``valkey-server
--cluster-enabled yes`` processes on loopback, from the same binary as the
embedded store. The app is given node 0's URL only and detects cluster mode
itself. An event's keys span several hash slots; each round goes as one
script call per slot, sent at once (``serving.store.split_by_slot``).
Checked against the same events on a single node:

* every answer is equal, for a topology with every function (write logs,
  ``CountUnique``'s sorted sets, ``after`` reads, ``exclusive``, filters),
  and the state is spread over every node;
* the store (all nodes together) equals the single node's, key for key;
* events retried with their ``_id`` count once;
* under load, slots migrate between nodes (``CLUSTER SETSLOT`` /
  ``MIGRATE``, as ``valkey-cli --cluster reshard`` does) while ``/batch``
  requests flow: clients see at most 503s, which they retry with the same
  ids, and the store afterwards equals the single node's: nothing lost,
  nothing counted twice.
"""

from __future__ import annotations

import asyncio
import threading
import time

import orjson
import pytest
from fastapi.testclient import TestClient

from serving.app import create_app
from serving.settings import Settings
from serving.store import Store, slot_tag, split_by_slot
from tests.e2e.helpers import (LOGIN_EVERY_FUNCTION, PURCHASE_AGGREGATES, login_purchase_events,
                               login_purchase_topology, post_all)
from tests.e2e.store_dump import assert_same_store, dump_store, live_part
from tests.serving.helpers import compile_text

TOPOLOGY = login_purchase_topology(LOGIN_EVERY_FUNCTION + """
uniq_all := CountUnique(user last 1 day)
""", PURCHASE_AGGREGATES)
T0 = 1_700_000_000_000


def _events(n: int, seed: int) -> list[dict]:
    events = login_purchase_events(n, seed=seed, start_ms=T0, n_users=40, n_ips=25)
    for i, e in enumerate(events):
        e["_id"] = f"e{seed}-{i}"
    return events


def _cluster_dump(cluster) -> dict:
    """The image of every node's keys together, without the ``_id`` markers (their keys differ by design)."""
    return {k: v for k, v in dump_store(cluster.url).items() if not k.startswith(b"sc:id:")}


def _single_dump(url: str) -> dict:
    return {k: v for k, v in dump_store(url).items() if not k.startswith(b"sc:id:")}


def test_the_store_detects_a_cluster_from_any_node(redis_cluster, redis_url):
    async def mode(url: str) -> bool:
        store = Store(url)
        try:
            return await store.connect()
        finally:
            await store.close()

    assert asyncio.run(mode(f"redis://127.0.0.1:{redis_cluster.ports[2]}/0")) is True
    assert asyncio.run(mode(redis_url)) is False


def test_split_by_slot_keeps_each_slots_keys_and_arguments():
    """One call per slot; other slots' keys become placeholders in the call's slot and lose their arguments;
    the merged reply restores slot-key order."""
    from redis.crc import key_slot

    keys = ["sc:id:{e1}", "", "sc:{a}:h1", "sc:{b}:h2", "", "sc:{a}:h3", "sc:{c}:h4"]
    layout = [(1, True), (2, False), (1, False), (0, True), (1, True)]
    argv = [T0, 5000, "", "after-a", "b1", "b2", "c-after"]
    calls, merge = split_by_slot(keys, argv, layout, "f" * 40)
    assert len(calls) == 3
    by_slot = {slot: (ks, args) for slot, ks, args in calls}
    a, b, c = (key_slot(x) for x in (b"a", b"b", b"c"))
    ks, args = by_slot[a]
    ph = "{" + slot_tag(a) + "}"
    assert ks == [f"sc:id:{ph}:ffffffffffff:e1", ph, "sc:{a}:h1", ph, ph, "sc:{a}:h3", ph]
    assert args == [T0, 5000, "", "after-a"]  # h3 is a read without after: no argument
    assert {key_slot(k.encode()) for k in ks} == {a}
    assert by_slot[b][1] == [T0, 5000, "", "b1", "b2"]
    assert by_slot[c][1] == [T0, 5000, "", "c-after"]
    assert all({key_slot(k.encode()) for k in ks} == {slot} for slot, ks, _ in calls)
    replies = {a: [1, "read-h1", "read-h3"], b: [1], c: [0, "read-h4"]}
    assert merge([replies[s] for s in by_slot]) == [0, "read-h1", "read-h3", "read-h4"]
    # a key without a hash tag of its own (a global aggregate's) gets placeholders in its slot too
    calls, _ = split_by_slot(["", "", "sc:{}:h9", "sc:{a}:h1"], [T0, "", ""], [(0, True), (0, True)], "f" * 40)
    assert all({key_slot(k.encode()) for k in ks} == {slot} for slot, ks, _ in calls) and len(calls) == 2
    assert {slot_tag(s) for s in range(16384)} and len({key_slot(slot_tag(s).encode()) for s in range(16384)}) == 16384
    with pytest.raises(ValueError):
        split_by_slot(keys, argv, layout[:-1], "f" * 40)


def test_online_values_and_store_on_a_cluster_equal_a_single_node(redis_cluster, redis_url):
    plan = compile_text(TOPOLOGY)
    events = _events(1500, seed=3)
    single = post_all(plan, redis_url, events)
    clustered = post_all(plan, redis_cluster.url, events)
    assert clustered == single
    assert all(redis_cluster.node(i).dbsize() > 10 for i in range(3))  # the state is spread over every node
    now = events[-1]["_time"]
    assert_same_store(live_part(_cluster_dump(redis_cluster), plan, now),
                      live_part(_single_dump(redis_url), plan, now), plan)


def test_many_concurrent_events_on_a_cluster_get_no_503(redis_cluster):
    """Regression (was a product bug: 503 ``store unreachable`` under load on a cluster). SPEC §5.1: an
    event's per-slot calls go at once, so 256 concurrent events need far more connections to a node than
    redis-py's asyncio cluster client allows by default (100, then ``MaxConnectionsError``, no waiting)."""
    from serving.evaluate import Evaluator

    plan = compile_text(TOPOLOGY)
    events = [{k: v for k, v in e.items() if k != "_id"} for e in _events(768, seed=8)]

    async def go() -> list:
        evaluator = Evaluator(plan, None)
        store = Store(redis_cluster.url, on_mode=lambda c: setattr(evaluator, "cluster", c))
        await store.connect()
        evaluator.run = store.run
        try:
            batches = [events[i:i + 256] for i in range(0, len(events), 256)]
            out = []
            for b in batches:  # 256 events at a time, concurrently
                out += await asyncio.gather(*[evaluator.process(e) for e in b], return_exceptions=True)
            return out
        finally:
            await store.close()

    out = asyncio.run(go())
    assert [type(x).__name__ for x in out if isinstance(x, Exception)] == []
    assert len(out) == 768


def test_events_retried_with_their_id_count_once_on_a_cluster(redis_cluster, redis_url):
    plan = compile_text(TOPOLOGY)
    events = _events(400, seed=4)
    post_all(plan, redis_url, events)
    post_all(plan, redis_cluster.url, events[:300])
    post_all(plan, redis_cluster.url, events[200:])  # 100 repeats, then the rest
    now = events[-1]["_time"]
    assert_same_store(live_part(_cluster_dump(redis_cluster), plan, now),
                      live_part(_single_dump(redis_url), plan, now), plan)


def _migrate(cluster, slot: int, src: int, dst: int) -> int:
    """Move ``slot`` from node ``src`` to node ``dst`` key by key, as ``valkey-cli --cluster reshard``; return keys moved."""
    s, d = cluster.node(src), cluster.node(dst)
    d.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", cluster.ids[src])
    s.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", cluster.ids[dst])
    moved = 0
    while True:
        keys = s.execute_command("CLUSTER", "GETKEYSINSLOT", slot, 5)
        if not keys:
            break
        s.execute_command("MIGRATE", "127.0.0.1", cluster.ports[dst], "", 0, 5000, "KEYS", *keys)
        moved += len(keys)
        time.sleep(0.05)  # let requests in between: some meet the slot half moved
    for i in range(cluster.masters):
        cluster.node(i).execute_command("CLUSTER", "SETSLOT", slot, "NODE", cluster.ids[dst])
    return moved


def test_slot_migration_under_load_loses_nothing_and_counts_nothing_twice(redis_cluster, redis_url):
    from redis.crc import key_slot

    plan = compile_text(TOPOLOGY)
    events = _events(2400, seed=5)
    post_all(plan, redis_url, events)
    app = create_app(plan, Settings(), redis_url=redis_cluster.url)
    moved: list[int] = []
    done, migrating = threading.Event(), threading.Event()

    def mover() -> None:
        # the six slots of node 0 holding the most keys, moved to node 1 and back while events flow
        owned = [key_slot(k) for k in redis_cluster.node(0).scan_iter(match="sc:*", count=1000)]
        busiest = sorted(set(owned), key=lambda s: -owned.count(s))[:6]
        for slot in busiest:
            if done.is_set():
                break
            migrating.set()
            moved.append(_migrate(redis_cluster, slot, 0, 1))
            moved.append(_migrate(redis_cluster, slot, 1, 0))
            migrating.clear()

    during, unavailable, i, chunk = 0, 0, 0, 20
    with TestClient(app) as c:
        # a first part before the moves, so the moved slots hold state
        while i < 800:
            r = c.post("/batch", content=orjson.dumps(events[i:i + chunk]), headers={"content-type": "application/json"})
            assert r.status_code == 200, r.text
            i += chunk
        thread = threading.Thread(target=mover)
        thread.start()
        while i < len(events):
            r = c.post("/batch", content=orjson.dumps(events[i:i + chunk]), headers={"content-type": "application/json"})
            if r.status_code == 503:
                unavailable += 1
                time.sleep(0.05)
                continue  # an at-least-once producer: the same events, the same ids
            assert r.status_code == 200, r.text
            during += migrating.is_set()
            i += chunk
            if i >= len(events) - 200:
                thread.join(timeout=120)  # the last events after the moves
        done.set()
        thread.join(timeout=120)
    assert len(moved) == 12 and all(moved), moved
    assert during >= 3, "too few requests met a slot in migration"
    now = events[-1]["_time"]
    assert_same_store(live_part(_cluster_dump(redis_cluster), plan, now),
                      live_part(_single_dump(redis_url), plan, now), plan)


def test_a_failure_inside_the_cluster_client_is_a_503_not_a_500(redis_cluster, monkeypatch):
    """redis-py's asyncio cluster client can fail a command with an AttributeError under concurrency (a
    connection reset by another task): the command did not complete, so the API answers 503 (retryable)."""
    plan = compile_text(TOPOLOGY)
    app = create_app(plan, Settings(), redis_url=redis_cluster.url)
    with TestClient(app) as c:
        store = app.state.store
        assert store.cluster is True and app.state.evaluator.cluster is True

        async def broken(*args, **kwargs):
            raise AttributeError("'NoneType' object has no attribute 'writelines'")

        monkeypatch.setattr(store, "_call", broken)
        r = c.post("/event", json={"_type": "login", "_time": T0, "user": "u1", "ip": "1.2.3.4", "amount": 3.0})
        assert r.status_code == 503 and r.json()["error"]["code"] == "store-unavailable", r.text
