"""What the API leaves in Redis: expiry, namespaces, pruning (SPEC §5.1-5.5)."""

from __future__ import annotations

import redis

from tests.serving.helpers import batch, client_for, compile_text

TOPO = """
event e
k := $.k as string
n := Count(by k last 10 minutes)
"""


def test_one_hash_per_state_and_key_with_expiry(redis_url):
    store = redis.Redis.from_url(redis_url)
    with client_for(TOPO, redis_url) as c:
        batch(c, [{"_type": "e", "_time": 1_700_000_000_000, "k": "a"},
                  {"_type": "e", "_time": 1_700_000_000_500, "k": "b{x}"}])
    keys = sorted(store.keys("sc:{*"))
    assert len(keys) == 2
    for key in keys:
        ttl = store.pttl(key)
        assert 600_000 < ttl <= 601_000          # W + r, by the store's clock
    assert keys[0].startswith(b"sc:{s1:a}:")
    assert keys[1].startswith(b"sc:{s4:b%7Bx%7D}:")


def test_definition_hash_namespaces():
    base = compile_text(TOPO)
    renamed = compile_text(TOPO.replace("k :=", "key :=").replace("by k", "by key").replace("n :=", "m :="))
    changed = compile_text(TOPO.replace("10 minutes", "11 minutes"))
    h = lambda p, name: p.events["e"].feature(name).aggregate.definition_hash  # noqa: E731
    assert h(base, "n") == h(renamed, "m")        # renaming keeps state
    assert h(base, "n") != h(changed, "n")        # a new definition gets new state


TOPO_MAX = """
event e
k := $.k as string
v := $.v as int
n := Max(v by k last 10 minutes)
"""

TOPO_HLL = """
event e
k := $.k as string
v := $.v as int
n := HyperLogLog(v by k last 10 minutes)
"""


def test_old_running_totals_are_pruned(redis_url):
    """A Count's running totals (compiler.algebra.lua pc_write) keep what a read at the last time minus the
    allowed lateness can use: the members after its window's edge, one before it (the read's base), plus
    up to a pruning period ((W + r + L) / 2, ops.prune_every_ms) of slack."""
    store = redis.Redis.from_url(redis_url)
    t0 = 1_700_000_000_000
    with client_for(TOPO, redis_url, allowed_lateness=120) as c:
        events = [{"_type": "e", "_time": t0 + i * 7_000, "k": "a"} for i in range(600)]  # 70 min of events
        out = batch(c, events)
    assert out[-1]["n"] == 86                     # 10 min / 7 s, inclusive
    (key,) = store.keys("sc:{s1:a}:*")
    assert key.endswith(b":z") and store.type(key) == b"zset"
    scores = [s for _, s in store.zrange(key, 0, -1, withscores=True)]
    last = t0 + 599 * 7_000
    assert min(scores) >= last - (600 + 120 + 361 + 1 + 7) * 1000
    assert len(scores) <= (600 + 120 + 361 + 7) // 7 + 2


def test_old_deque_members_are_pruned(redis_url):
    """A Max written online (compiler.algebra.lua mx_write) keeps its deque's members of the window a read at
    the last time minus the allowed lateness sees, and the writes they popped whose popper came after that
    time, plus up to a pruning period ((W + r + L) / 2, ops.prune_every_ms) of slack."""
    store = redis.Redis.from_url(redis_url)
    t0 = 1_700_000_000_000
    with client_for(TOPO_MAX, redis_url, allowed_lateness=120) as c:
        events = [{"_type": "e", "_time": t0 + i * 7_000, "k": "a", "v": i % 50} for i in range(600)]  # 70 min
        out = batch(c, events)
    assert [o["n"] for o in out[-3:]] == [49, 49, 49]
    (key,) = store.keys("sc:{s1:a}:*")
    assert key.endswith(b":z") and store.type(key) == b"zset"
    members = store.zrange(key, 0, -1, withscores=True)
    last = t0 + 599 * 7_000
    deque = [(m, s) for m, s in members if s < 2**49]
    popped_ng = [s - 2**50 for _, s in members if s >= 2**49]
    # the deque: falling values, the newest write last, nothing a read at last - L cannot see but slack
    values = [int(m.split(b"|")[1]) for m, _ in deque]
    assert values == sorted(values, reverse=True) and len(set(values)) == len(values) and deque[-1][1] == last
    assert min(s for _, s in deque) >= last - (600 + 120 + 361 + 1 + 7) * 1000
    assert popped_ng and min(popped_ng) > last - (120 + 361 + 1) * 1000
    assert len(members) <= (600 + 120 + 361 + 7) // 7 + 2


def test_old_tiles_are_pruned(redis_url):
    """HyperLogLog, the one function whose online writes keep the tile ladder: tiles and raw buckets older
    than a read at the last time minus the allowed lateness can use are pruned."""
    store = redis.Redis.from_url(redis_url)
    t0 = 1_700_000_000_000
    with client_for(TOPO_HLL, redis_url, allowed_lateness=120) as c:
        events = [{"_type": "e", "_time": t0 + i * 7_000, "k": "a", "v": i % 50} for i in range(600)]  # 70 min
        out = batch(c, events)
    assert round(out[-1]["n"]) == 50  # 86 writes of the 50 values in the window (linear counting: near exact)
    (key,) = store.keys("sc:{s1:a}:*")
    fields = store.hkeys(key)
    # only tiles a read at the last time minus the allowed lateness (120 s) can still use survive (plus
    # <= (W + r + L)/2 of slack, ops.prune_every_ms), and raw tiles of the last 120 s (SPEC §3.3)
    oldest_s = min(int(f[1:]) for f in fields if f.startswith(b"s"))
    assert oldest_s * 1000 >= t0 + 599 * 7_000 - (600 + 120 + 361 + 2) * 1000
    raw = [int(f[1:]) for f in fields if f.startswith(b"B")]  # 15-s raw buckets, deleted 4 at a time
    assert 8 <= len(raw) <= 9 + 4 and (min(raw) + 1) * 15_000 >= t0 + 599 * 7_000 - 120_000 - 4 * 15_000
