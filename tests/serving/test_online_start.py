"""The online path records, per aggregate state, the earliest event time it wrote (SPEC §5.6, §6).

``sc:online`` (``serving.store.ONLINE_KEY``): field = definition hash, value =
the minimum event time (epoch ms) of any online write into that state. Backfill
refuses to overwrite that time; ``scowl status`` shows it. The record costs
one extra command per state at a process's first write and at each new
earliest time, none in the common (in-order) case.
"""

from __future__ import annotations

import redis

from serving.store import ONLINE_KEY
from tests.serving.helpers import batch, client_for, compile_text

TOPO = """
event login
user := $.user as string?
big := $.amount as int ? 0
n_user := Count(by user last 1 hour)
n_big := Count(where big > 10 last 1 day)
seq_user := Sequence(user by user limit 3)

event query
user := $.user as string
seen := Count<login>(by user last 1 hour)
"""

T0 = 1_704_067_200_000  # 2024-01-01T00:00:00Z


def _hashes():
    plan = compile_text(TOPO)
    feats = {f.name: f for f in plan.events["login"].features}
    return {n: feats[n].aggregate.definition_hash for n in ("n_user", "n_big", "seq_user")}


def _script_calls(client) -> int:
    """Script calls the store ran since its last ``CONFIG RESETSTAT``: ``FCALL`` (a round's function library) and
    ``EVALSHA`` (where the store refuses functions, and ``Store.record_online``'s record), read-only forms included."""
    stats = client.info("commandstats")
    return sum(int(stats.get(f"cmdstat_{c}", {}).get("calls", 0)) for c in ("fcall", "fcall_ro", "evalsha", "evalsha_ro"))


def test_earliest_written_time_per_state(redis_url):
    """Only states actually written are recorded, with the minimum event time, also when an earlier event arrives late."""
    h = _hashes()
    store = redis.Redis.from_url(redis_url)
    with client_for(TOPO, redis_url) as c:
        # a query event reads only; a login with a null user writes no by-user state; small amounts fail the filter
        batch(c, [{"_type": "query", "_time": T0 - 5_000, "user": "a"},
                  {"_type": "login", "_time": T0 + 10_000, "user": None, "amount": 1}])
        assert store.hgetall(ONLINE_KEY) == {}
        batch(c, [{"_type": "login", "_time": T0 + 20_000, "user": "a", "amount": 1}])
        assert store.hgetall(ONLINE_KEY) == {h["n_user"].encode(): str(T0 + 20_000).encode(),
                                             h["seq_user"].encode(): str(T0 + 20_000).encode()}
        batch(c, [{"_type": "login", "_time": T0 + 30_000, "user": "b", "amount": 50},   # first n_big write
                  {"_type": "login", "_time": T0 + 5_000, "user": "c", "amount": 1},     # late: earlier time
                  {"_type": "login", "_time": T0 + 40_000, "user": "a", "amount": 99}])
    assert {k.decode(): int(v) for k, v in store.hgetall(ONLINE_KEY).items()} == {
        h["n_user"]: T0 + 5_000, h["seq_user"]: T0 + 5_000, h["n_big"]: T0 + 30_000}

    # a new process (new app) never raises the stored time: the record keeps the minimum
    with client_for(TOPO, redis_url) as c:
        batch(c, [{"_type": "login", "_time": T0 + 3_600_000, "user": "a", "amount": 99}])
    assert {k.decode(): int(v) for k, v in store.hgetall(ONLINE_KEY).items()} == {
        h["n_user"]: T0 + 5_000, h["seq_user"]: T0 + 5_000, h["n_big"]: T0 + 30_000}


def test_in_order_events_cost_one_extra_command_per_process(redis_url):
    """In time order: one script call per event plus one record at the first write, whatever the number of events."""
    store = redis.Redis.from_url(redis_url)
    events = [{"_type": "login", "_time": T0 + i * 1_000, "user": f"u{i % 4}", "amount": 50 + i} for i in range(200)]
    with client_for(TOPO, redis_url) as c:
        batch(c, events[:1])  # the first write records all three states in one command
        store.config_resetstat()
        batch(c, events[1:])
        assert _script_calls(store) == len(events) - 1
    assert {int(v) for v in store.hvals(ONLINE_KEY)} == {T0}
