"""The ``event.lua`` merge ops of stream micro-batches against the Python algebra (SPEC §5.7).

``B`` (the exactly-once guard), ``DM`` (decayed partials), ``HMS``
(HyperLogLog registers), ``ZM`` (write-log members with batch ranks) run in
a real Redis-protocol server and are compared with ``compiler.algebra.ops``
(``merge``) and with the per-write ops the API uses. No Spark.
"""

from __future__ import annotations

import math
import random

import pytest
import redis

from compiler.algebra.ops import DecayedOp, HyperLogLogOp, log_member
from compiler.algebra.script import event_script


@pytest.fixture()
def script(redis_url):
    client = redis.Redis.from_url(redis_url)
    yield client, client.register_script(event_script())
    client.close()


def test_guard_applies_each_batch_once_per_stream(script):
    client, run = script
    args = lambda b, name="_b:s1": ["B", 1, name, b, 60_000, "I", 1, "m1", 5]  # noqa: E731
    assert run(keys=["k"], args=args(3)) == [1]
    assert run(keys=["k"], args=args(3)) == [0]  # the same batch again: nothing
    assert run(keys=["k"], args=args(2)) == [0]  # an older batch: nothing
    assert run(keys=["k"], args=args(3, "_b:s2")) == [1]  # another stream has its own marker
    assert run(keys=["k"], args=args(4)) == [1]
    assert client.hget("k", "m1") == b"15" and client.hget("k", "_b:s1") == b"4"
    assert 0 < client.pttl("k") <= 60_000


def test_decayed_merge_equals_the_algebra(script):
    client, run = script
    op = DecayedOp(("float",), kind="sum", window_ms=600_000)
    rng = random.Random(3)
    for _ in range(30):
        client.delete("d")
        a = (rng.randint(0, 10**7), rng.uniform(0, 50), rng.uniform(0.1, 5))
        b = (rng.randint(0, 10**7), rng.uniform(0, 50), rng.uniform(0.1, 5))
        for ir in (a, b):
            run(keys=["d"], args=["DM", 1, ir[0], repr(ir[1]), repr(ir[2]), op.window_ms])
        got = op.decode(client.hmget("d", "dt", "dv", "dw"))
        want = op.merge(a, b)
        assert got[0] == want[0]
        assert math.isclose(got[1], want[1], rel_tol=1e-12) and math.isclose(got[2], want[2], rel_tol=1e-12)


def test_hll_register_merge_equals_the_algebra_and_the_per_write_op(script):
    client, run = script
    op = HyperLogLogOp(("string",))
    rng = random.Random(5)
    items = [f"x{rng.randint(0, 5000)}" for _ in range(600)]
    one = two = op.init()
    for i, x in enumerate(items):
        if i % 2:
            one = op.update(one, [x], 0)
        else:
            two = op.update(two, [x], 0)
        run(keys=["online"], args=op.write_args(1, ["f"], [x], 0))
    for ir in (one, two):
        run(keys=["merged"], args=["HMS", 1, "f", op.encode(ir)[0]])
    merged = op.decode([client.hget("merged", "f")])
    assert merged == op.merge(one, two) == op.decode([client.hget("online", "f")])


def test_log_merge_ranks_follow_the_existing_members(script):
    client, run = script
    n, ttl = 4, 60_000
    # the API wrote two members at t=1000 (ranks 0, 1) ...
    for j in ('{"v0":"a"}', '{"v0":"b"}'):
        run(keys=["z"], args=["ZW", 1, 1000, j, n, 0, ttl])
    # ... then a batch brings two more at 1000 (batch ranks 0, 1) and one at 2000
    run(keys=["z"], args=["ZM", 1, 3, n, 0, ttl, 1000, 0, '{"v0":"c"}', 1000, 1, '{"v0":"d"}', 2000, 0, '{"v0":"e"}'])
    members = [m.decode() for m in client.zrange("z", 0, -1)]
    # in (time, arrival) order; nothing trimmed: every member lies within the allowed lateness of the
    # latest (SPEC §3.3: a read up to an hour late may need them)
    assert members == [log_member(0, 1000, ["a"]), log_member(1, 1000, ["b"]), log_member(2, 1000, ["c"]),
                       log_member(3, 1000, ["d"]), log_member(0, 2000, ["e"])]
    # an hour and more later: the n = 4 latest before the last hour stay, and the new one
    run(keys=["z"], args=["ZM", 1, 1, n, 0, ttl, 3_602_001, 0, '{"v0":"f"}'])
    members = [m.decode() for m in client.zrange("z", 0, -1)]
    assert members == [log_member(1, 1000, ["b"]), log_member(2, 1000, ["c"]), log_member(3, 1000, ["d"]),
                       log_member(0, 2000, ["e"]), log_member(0, 3_602_001, ["f"])]


LATE_MS = 3_600_000  # event.lua's LATE_MS: windows.ALLOWED_LATENESS_S


@pytest.mark.parametrize("seed", range(40))
def test_log_merge_of_many_members_equals_one_member_at_a_time(script, seed):
    """One ``ZM`` op with a batch's members (one trim, as of the last) leaves the log that adding them
    one by one leaves, each trimmed as of itself (``ZM`` of one member per call: its rank then follows
    the members added before it at its ms, as the batch rank does)."""
    client, run = script
    rng = random.Random(seed)
    n, ttl, wr = rng.choice([1, 2, 5]), 600_000_000, rng.choice([0, 60_000, 7_200_000])
    base = sorted(rng.randrange(0, 4 * LATE_MS, 500_000) for _ in range(rng.randint(0, 8)))
    start = rng.randrange(0, 4 * LATE_MS, 500_000)
    batch = sorted(start + rng.randrange(0, 3 * LATE_MS, 250_000) for _ in range(rng.randint(1, 12)))
    client.delete("one", "each")
    for key in ("one", "each"):
        for j, t in enumerate(base):
            run(keys=[key], args=["ZW", 1, t, f'{{"v0":"old{j}"}}', n, 0, ttl])
    members, rank_at = [], {}
    for j, t in enumerate(batch):
        members.append((t, rank_at.get(t, 0), f'{{"v0":"new{j}"}}'))
        rank_at[t] = rank_at.get(t, 0) + 1
    run(keys=["one"], args=["ZM", 1, len(members), n, batch[-1] - wr - LATE_MS, ttl,
                            *[x for m in members for x in m]])
    for t, _, j in members:
        run(keys=["each"], args=["ZM", 1, 1, n, t - wr - LATE_MS, ttl, t, 0, j])
    one = client.zrange("one", 0, -1, withscores=True)
    assert one == client.zrange("each", 0, -1, withscores=True)
    assert any(m.decode().endswith('"new%d"}' % (len(batch) - 1)) for m, _ in one)


def test_stream_pruning_keeps_what_a_late_read_counts(script):
    """The stream's ``X`` and ``SX`` (``writer.sink.merge_call``) prune as serving's passes do: a tile or a
    ``CountUnique`` member that a read up to the allowed lateness late counts stays; older ones go."""
    from types import SimpleNamespace

    from writer.sink import merge_call, merge_params

    client, run = script
    w, r = 3_600_000, 1_000  # a 1-hour window at 1-second resolution
    count = SimpleNamespace(definition_hash="c0", window_s=3600, resolution_s=1, limit=None, function="Count",
                            value_types=(), writes={})
    uniq = SimpleNamespace(definition_hash="u0", window_s=3600, resolution_s=1, limit=None, function="CountUnique",
                           value_types=("string",), writes={})
    params = merge_params([count, uniq])
    t = 1_700_000_000_000
    needed = t - LATE_MS - w + 5_000  # counted by a read at t - LATE_MS (within the window), then pruned
    gone = t - LATE_MS - w - r - 5_000  # no read up to LATE_MS late counts it
    tile = lambda ms: f"s{ms // 1000}"  # noqa: E731
    ops = [("I", tile(ms), "1") for ms in (gone, needed, t)]
    keys, args = merge_call("sc:{k}:c0", ops, t, params, "_b:s", 1)
    run(keys=keys, args=args)
    fields = {f.decode() for f in client.hkeys("sc:{k}:c0")}
    assert tile(needed) in fields and tile(t) in fields and tile(gone) not in fields
    seen = [("SEEN", f'u["{name}"]', str(ms)) for name, ms in (("a", gone), ("b", needed), ("c", t))]
    keys, args = merge_call("sc:{k}:u0", seen, t, params, "_b:s", 1)
    run(keys=keys, args=args)
    assert {m.decode() for m in client.zrange("sc:{k}:u0", 0, -1)} == {'u["b"]', 'u["c"]'}
