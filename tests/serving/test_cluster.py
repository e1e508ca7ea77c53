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
import redis
import pytest
from fastapi.testclient import TestClient

from serving.app import create_app
from serving.settings import Settings
from compiler.algebra.storekeys import ONLINE_KEY
from serving.store import Store, slot_tag, split_by_slot
from tests.e2e.helpers import (LOGIN_EVERY_FUNCTION, PURCHASE_AGGREGATES, login_purchase_events,
                               login_purchase_topology, post_all)
from tests.e2e.store_dump import assert_same_store, dump_store, live_part
from tests.serving.helpers import compile_text

TOPOLOGY = login_purchase_topology(LOGIN_EVERY_FUNCTION + """
uniq_all := CountUnique(user last 1 day)
""", PURCHASE_AGGREGATES)
#: :data:`TOPOLOGY` without its aggregate over an aggregate (``since_prev``: ``after`` a ``LatestTime``), so
#: every event makes one script call and ``/batch`` sends them pipelined (``Evaluator.process_batch``)
ONE_CALL_TOPOLOGY = TOPOLOGY.replace("since_prev := Count(by user after prev last 1 day)\n", "")
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


async def _cluster_run(url: str, plan, events: list[dict], before=None, warm: int = 20) -> tuple[list, Store]:
    """Evaluate ``events`` one after the other through a :class:`Store` on the cluster at ``url``.

    The first ``warm`` events load the round functions; then ``before(store)`` runs (a test's change), and the
    rest are evaluated. Returns each event's features (or the exception it raised) and the store (closed).
    """
    from serving.evaluate import Evaluator

    evaluator = Evaluator(plan, None)
    store = Store(url, on_mode=lambda c: setattr(evaluator, "cluster", c))
    await store.connect()
    evaluator.run = store.run
    out: list = []
    try:
        for i, e in enumerate(events):
            if i == warm and before is not None:
                before(store)
            try:
                out.append((await evaluator.process(e))["features"])
            except Exception as exc:  # noqa: BLE001 -- the test looks at it
                out.append(exc)
    finally:
        await store.close()
    return out, store


def test_round_calls_on_a_cluster_go_per_node_on_the_hot_path(redis_cluster, redis_url):
    """Once the functions are loaded, a round's per-slot calls go pipelined, one connection per node
    (``Store._node_calls``), never through redis-py's cluster client, and the answers are the single node's."""
    plan = compile_text(TOPOLOGY)
    events = [{k: v for k, v in e.items() if k != "_id"} for e in _events(300, seed=11)]
    want = post_all(plan, redis_url, events)
    through_client: list[str] = []
    per_round: list[int] = []

    def watch(store: Store) -> None:
        assert store.functions is True
        execute, node_calls = store.client.execute_command, store._node_calls

        async def counted_execute(*args, **kwargs):
            through_client.append(str(args[0]))
            return await execute(*args, **kwargs)

        async def counted_node_calls(node, script, sha, name, calls):
            per_round.append(len(calls))
            return await node_calls(node, script, sha, name, calls)

        store.client.execute_command = counted_execute
        store._node_calls = counted_node_calls

    got, _ = asyncio.run(_cluster_run(redis_cluster.url, plan, events, before=watch))
    assert got == want
    assert [c for c in through_client if c in ("FCALL", "EVALSHA", "EVAL")] == []
    assert sum(per_round) > len(events) - 20  # every round went per node (at least one call each)
    assert max(per_round) > 1  # a node's calls of one round share one pipeline


def test_an_events_id_marker_on_a_cluster_goes_on_the_hot_path(redis_cluster, redis_url):
    """The API's own ``_id`` marker of an event (``SET .. NX PX``, ``Store._mark_id``) goes to its node on a
    hot-path connection, not through redis-py's cluster client (~21% of a cluster's events/s with ``_id``s);
    a repeated event is still answered, not written again (SPEC §4)."""
    plan = compile_text(TOPOLOGY)
    events = _events(120, seed=17)
    want = post_all(plan, redis_url, events + events[100:])
    sent: list[list[tuple]] = []
    through_client: list[str] = []
    got, _ = asyncio.run(_cluster_run(redis_cluster.url, plan, events + events[100:],
                                      before=lambda s: _watch_nodes(s, sent, through_client)))
    assert got == want
    assert "SET" not in through_client
    markers = [cmd for cmds in sent for cmd in cmds if cmd[0] == "SET"]
    # one per event after the 20 that load the functions, the 20 repeats included (the marker is there: not set)
    assert len(markers) == len(events) and all(cmd[3:] == ("NX", "PX", 86_400_000) for cmd in markers)


def test_a_stale_slot_map_on_the_hot_path_is_followed_and_mended(redis_cluster, redis_url):
    """Every slot mapped to a node that does not own it: each call is answered MOVED without running, goes
    again through redis-py's cluster client, which follows it and mends its slot map; the answers are the
    single node's (nothing lost, nothing counted twice). SPEC §5.1."""
    plan = compile_text(TOPOLOGY)
    events = [{k: v for k, v in e.items() if k != "_id"} for e in _events(200, seed=12)]
    want = post_all(plan, redis_url, events)
    owners: dict[int, str] = {}

    def scramble(store: Store) -> None:
        cache = store.client.nodes_manager.slots_cache
        primaries = store.client.get_primaries()
        for slot, nodes in cache.items():
            owners[slot] = nodes[0].name
            cache[slot] = [next(n for n in primaries if n.name != nodes[0].name)]

    got, store = asyncio.run(_cluster_run(redis_cluster.url, plan, events, before=scramble))
    assert got == want
    cache = store.client.nodes_manager.slots_cache
    mended = [s for s in owners if cache[s][0].name == owners[s]]
    assert len(mended) > 20  # the slots the events touched point at their owners again


def test_a_connection_failure_on_the_hot_path_is_a_503_then_the_cluster_client_carries_on(redis_cluster,
                                                                                         redis_url):
    """A node connection that fails on the hot path: that event gets ``StoreUnavailable`` (the API's 503; no
    call of it is sent twice), the next events go through redis-py's cluster client for a while (whose error
    handling refreshes the slot map after a failover), and the failed event retried with its ``_id``, as a
    client does, leaves the store the single node's: its slots that ran are not written again."""
    from serving.store import StoreUnavailable

    plan = compile_text(TOPOLOGY)
    events = _events(60, seed=13)
    through_client: list[str] = []

    def break_once(store: Store) -> None:
        for idle in store._node_idle.values():
            idle.clear()  # (left open: the store closes only what it keeps)
        make = store._node_connection

        def dead(node):
            store._node_connection = make  # the next connections are real again
            conn = make(node)
            conn.port = 1  # nothing listens there: the connect fails
            return conn

        store._node_connection = dead
        execute = store.client.execute_command

        async def counted_execute(*args, **kwargs):
            through_client.append(str(args[0]))
            return await execute(*args, **kwargs)

        store.client.execute_command = counted_execute

    retried = events + [events[20]]  # the failed event again, last
    got, store = asyncio.run(_cluster_run(redis_cluster.url, plan, retried, before=break_once))
    assert isinstance(got[20], StoreUnavailable), got[20]
    assert not any(isinstance(x, Exception) for x in got[:20] + got[21:])
    assert "FCALL" in through_client  # the calls after the failure went through the cluster client
    assert got[:20] == post_all(plan, redis_url, events[:20])
    post_all(plan, redis_url, events[20:])
    now = events[-1]["_time"]
    single = {k: v for k, v in _single_dump(redis_url).items() if k != ONLINE_KEY.encode()}  # (the app's record)
    assert_same_store(live_part(_cluster_dump(redis_cluster), plan, now), live_part(single, plan, now), plan)


async def _cluster_batch_run(url: str, plan, events: list[dict], before=None, warm: int = 20,
                             pipeline: int = 64, event_stream: str | None = None) -> tuple[list, Store]:
    """:func:`_cluster_run` through ``Evaluator.process_batch`` (``POST /batch``'s path): the first ``warm``
    events one batch, then ``before(store)``, then the rest one batch, pipelined in chunks of ``pipeline``
    (and appended to ``event_stream``, if given)."""
    from serving.evaluate import Evaluator

    evaluator = Evaluator(plan, None, pipeline=pipeline, event_stream=event_stream)
    store = Store(url, on_mode=lambda c: setattr(evaluator, "cluster", c))
    await store.connect()
    evaluator.run, evaluator.run_many = store.run, store.run_many
    out: list = []
    try:
        for k, part in enumerate((events[:warm], events[warm:])):
            if k == 1 and before is not None:
                before(store)
            items = [(e, evaluator.parse(e)) for e in part]
            out += [r["features"] async for _, r in evaluator.process_batch(items)]
    finally:
        await store.close()
    return out, store


def _watch_nodes(store: Store, sent: list[list[tuple]], through_client: list[str]) -> None:
    """Record every hot-path pipeline's commands (``Store._on_node``) and every command of redis-py's cluster
    client in ``sent`` and ``through_client``."""
    on_node, execute = store._on_node, store.client.execute_command

    async def counted_on_node(node, cmds):
        sent.append(list(cmds))
        return await on_node(node, cmds)

    async def counted_execute(*args, **kwargs):
        through_client.append(str(args[0]))
        return await execute(*args, **kwargs)

    store._on_node = counted_on_node
    store.client.execute_command = counted_execute


def test_a_batch_on_a_cluster_goes_to_each_node_at_once_and_answers_as_a_single_node(redis_cluster, redis_url):
    """``POST /batch`` on a cluster: the per-slot calls of a chunk's events go to each node in one pipeline,
    a slot's calls in event order, those of a slot with several in one ``MULTI``/``EXEC``
    (``Store._run_many_split``); nothing goes through redis-py's cluster client; the answers and the store
    are the single node's (SPEC §3.3, §5.1)."""
    plan = compile_text(ONE_CALL_TOPOLOGY)
    events = _events(600, seed=14)  # 40 users, 25 ips: a chunk holds several calls of one slot
    want = post_all(plan, redis_url, events)
    sent: list[list[tuple]] = []
    through_client: list[str] = []
    got, store = asyncio.run(_cluster_batch_run(redis_cluster.url, plan, events, event_stream="ev",
                                                before=lambda s: _watch_nodes(s, sent, through_client)))
    assert got == want
    # nothing through the cluster client: not the calls, not the _id markers, not the event stream's appends
    assert [c for c in through_client if c in ("FCALL", "EVALSHA", "EVAL", "SET", "XADD")] == []
    client = redis.RedisCluster.from_url(redis_cluster.url)
    appended = client.xrange("ev")
    assert [orjson.loads(f[b"event"])["_id"] for _, f in appended] == [e["_id"] for e in events]
    client.delete("ev")  # (the store comparison below is of state keys)
    assert max(sum(cmd[0] == "XADD" for cmd in cmds) for cmds in sent) > 20  # a chunk's appends at once
    assert sum(cmd[0] == "SET" for cmds in sent for cmd in cmds) == len(events) - 20  # (one per event watched)
    fcalls = [cmd for cmds in sent for cmd in cmds if cmd[0] == "FCALL"]
    assert len(fcalls) > len(events) - 20  # every event's calls went on the hot path, per node
    assert max(sum(cmd[0] == "FCALL" for cmd in cmds) for cmds in sent) > 20  # many events per pipeline
    multi = [cmds for cmds in sent if ("MULTI",) in cmds]
    assert multi and all(cmds.count(("MULTI",)) == cmds.count(("EXEC",)) for cmds in sent)
    now = events[-1]["_time"]
    single = {k: v for k, v in _single_dump(redis_url).items() if k != ONLINE_KEY.encode()}  # (the app's record)
    assert_same_store(live_part(_cluster_dump(redis_cluster), plan, now), live_part(single, plan, now), plan)


def test_a_batch_on_a_cluster_with_a_stale_slot_map_runs_each_slots_calls_again_in_order(redis_cluster, redis_url):
    """Every slot mapped to a node that does not own it: a chunk's calls are answered MOVED (a transaction
    of a slot's calls, ``EXECABORT``: none of them ran), go again one by one in event order through redis-py's
    cluster client, which mends its slot map; the answers and the store are the single node's, and the event
    stream holds every event in order (its appends, refused whole too, went again in order)."""
    plan = compile_text(ONE_CALL_TOPOLOGY)
    events = _events(300, seed=15)
    want = post_all(plan, redis_url, events)
    sent: list[list[tuple]] = []
    through_client: list[str] = []

    def scramble(store: Store) -> None:
        cache = store.client.nodes_manager.slots_cache
        primaries = store.client.get_primaries()
        for slot, nodes in cache.items():
            cache[slot] = [next(n for n in primaries if n.name != nodes[0].name)]
        _watch_nodes(store, sent, through_client)

    got, store = asyncio.run(_cluster_batch_run(redis_cluster.url, plan, events, before=scramble, event_stream="ev"))
    assert got == want
    assert through_client.count("FCALL") > 20  # calls that did not run went again through the cluster client
    assert any(("MULTI",) in cmds for cmds in sent[:3])  # (the first chunk's transactions were refused whole)
    # the event stream's node was mapped wrong too: each chunk's appends refused whole, then appended in order
    assert through_client.count("XADD") > 20
    client = redis.RedisCluster.from_url(redis_cluster.url)
    assert [orjson.loads(f[b"event"])["_id"] for _, f in client.xrange("ev")] == [e["_id"] for e in events]
    client.delete("ev")
    now = events[-1]["_time"]
    single = {k: v for k, v in _single_dump(redis_url).items() if k != ONLINE_KEY.encode()}  # (the app's record)
    assert_same_store(live_part(_cluster_dump(redis_cluster), plan, now), live_part(single, plan, now), plan)


def test_late_events_are_appended_to_the_event_stream_on_a_cluster(redis_cluster, redis_url):
    """``SCOWL_EVENT_STREAM`` on a cluster: every accepted event is appended, one posted late too (its reply's
    flag has the lateness bits beside bit 0; was left out), one at a time and through ``/batch`` alike; a
    repeated ``_id`` is not appended again (SPEC §4, §5.7)."""
    import redis

    plan = compile_text(TOPOLOGY)
    events = _events(40, seed=16)
    events[30]["_time"] = events[10]["_time"]  # late by 20 events' time
    for url in (redis_url, redis_cluster.url):
        redis.Redis.from_url(redis_url).delete("ev")
        app = create_app(plan, Settings(event_stream="ev"), redis_url=url)
        with TestClient(app) as c:
            for e in events[:20]:
                assert c.post("/event", json=e).status_code == 200
            r = c.post("/batch", content=orjson.dumps(events[20:] + events[35:]),  # 5 repeats last
                       headers={"content-type": "application/json"})
            assert r.status_code == 200, r.text
        if url == redis_url:
            client = redis.Redis.from_url(redis_url)
        else:
            client = redis.RedisCluster.from_url(url)
        ids = [orjson.loads(f[b"event"])["_id"] for _, f in client.xrange("ev")]
        assert ids == [e["_id"] for e in events], url


def test_event_stream_maxlen_caps_the_stream_on_one_server_and_on_a_cluster(redis_cluster, redis_url):
    """``SCOWL_EVENT_STREAM_MAXLEN``: every append trims the event stream to about that many entries
    (``XADD ... MAXLEN ~``: whole macro nodes of ``stream-node-max-entries``, 100, so fewer than 100 more
    stay), one at a time and through ``/batch``, in the scripts (one server) and in the appends a cluster
    sends apart from them; what stays is the latest events, in order. A cap of 0 is refused."""
    plan = compile_text(TOPOLOGY)
    events = _events(300, seed=21)
    for url in (redis_url, redis_cluster.url):
        redis.Redis.from_url(redis_url).delete("ev")
        app = create_app(plan, Settings(event_stream="ev", event_stream_maxlen=20), redis_url=url)
        with TestClient(app) as c:
            for e in events[:150]:
                assert c.post("/event", json=e).status_code == 200
            r = c.post("/batch", content=orjson.dumps(events[150:]), headers={"content-type": "application/json"})
            assert r.status_code == 200, r.text
        client = redis.Redis.from_url(redis_url) if url == redis_url else redis.RedisCluster.from_url(url)
        ids = [orjson.loads(f[b"event"])["_id"] for _, f in client.xrange("ev")]
        assert 20 <= len(ids) < 20 + 100, (url, len(ids))
        assert ids == [e["_id"] for e in events[-len(ids):]], url
        client.delete("ev")
    with pytest.raises(ValueError, match="event_stream_maxlen"):
        Settings(event_stream="ev", event_stream_maxlen=0)


def test_a_slots_later_call_in_a_batch_never_runs_before_an_earlier_one_that_was_refused(redis_cluster, redis_url):
    """The per-slot order a pipelined ``/batch`` keeps on a cluster, where a node refuses one call of a slot
    and could run the next: in a slot in migration, the node runs a call whose declared keys it all holds and
    answers ``TRYAGAIN`` to one missing some. Here event 1 (``a``: a ``HyperLogLog`` whose hash the node
    holds and a ``Count``, whose declared key is never made) is refused, and event 2 (``b``: the
    ``HyperLogLog`` alone) would run; a test-made key stands for the call's placeholders, so that the node
    holds all of event 2's. Sent in one transaction, both are refused and go again, in order, once the slot
    has moved: event 2 counts event 1's user, as on one server (pipelined without the transaction, event 2
    ran first and answered 2, not 3)."""
    from redis.crc import key_slot

    plan = compile_text("""
event a
k := $.k as string
u := $.u as string
h := HyperLogLog<a, b>(u by k last 1 day)
c := Count(by k last 1 day)

event b
k := $.k as string
u := $.u as string
h := HyperLogLog<a, b>(u by k last 1 day)
""")
    warm = [{"_type": "a", "_time": T0 + i, "k": f"w{i}", "u": "u0"} for i in range(5)]
    events = warm + [{"_type": "a", "_time": T0 + 10, "k": "x", "u": "u1"},
                     {"_type": "a", "_time": T0 + 20, "k": "x", "u": "u2"},
                     {"_type": "b", "_time": T0 + 30, "k": "x", "u": "u3"}]
    want = post_all(plan, redis_url, events)
    assert want[-1]["h"] == 3
    cluster = redis_cluster
    state = plan.events["a"].feature("h").aggregate.definition_hash
    slot = key_slot(f"sc:{{s1:x}}:{state}".encode())
    src = _owner(cluster, slot)
    dst = (src + 1) % cluster.masters
    refused: list[int] = []

    def migrate_half(store: Store) -> None:
        # event 2's declared keys all held by the node: its placeholder made, its state's hash written already
        cluster.node(src).set("{" + slot_tag(slot) + "}", "1")
        cluster.node(dst).execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", cluster.ids[src])
        cluster.node(src).execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", cluster.ids[dst])
        call = store._call

        async def finish_then_call(script, sha, keys, argv, slot_=None):
            if not refused:  # the first call that goes again: the slot moves now, whole
                keys_in = cluster.node(src).execute_command("CLUSTER", "GETKEYSINSLOT", slot, 1000)
                cluster.node(src).execute_command("MIGRATE", "127.0.0.1", cluster.ports[dst], "", 0, 5000,
                                                  "KEYS", *keys_in)
                for i in range(cluster.masters):
                    cluster.node(i).execute_command("CLUSTER", "SETSLOT", slot, "NODE", cluster.ids[dst])
            refused.append(slot_)
            return await call(script, sha, keys, argv, slot_)

        store._call = finish_then_call

    try:
        got, _ = asyncio.run(_cluster_batch_run(cluster.url, plan, events, before=migrate_half, warm=6))
        assert got == want
        assert len(refused) >= 2  # both calls of the slot went again
    finally:
        for i in range(cluster.masters):
            cluster.node(i).flushall()
            cluster.node(i).execute_command("CLUSTER", "SETSLOT", slot, "NODE", cluster.ids[src])


def _owner(cluster, slot: int) -> int:
    """The index of the master that owns ``slot`` (``CLUSTER SLOTS`` of node 0)."""
    for lo, hi, primary, *_ in cluster.node(0).execute_command("CLUSTER", "SLOTS"):
        if lo <= slot <= hi:
            return cluster.ports.index(int(primary[1]))
    raise AssertionError(f"no owner of slot {slot}")
