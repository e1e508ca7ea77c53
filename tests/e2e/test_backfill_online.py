"""Backfill (real Spark) + online (real Redis) equals online-only (SPEC §3.3, §5.6).

A generated timeline over three days is processed twice on fresh stores:
(a) every event through ``POST /batch``; (b) the events before a split time by
``run_backfill``, the rest through ``POST /batch``. The responses of the
online part must be equal (floats within 1e-9 relative). Re-running the
backfill must leave the store unchanged.
"""

from __future__ import annotations


import orjson
import pytest

from compiler import compile_sources
from tests.e2e.helpers import close, login_purchase_events, post_all
from tests.e2e.store_dump import assert_same_store
from writer.backfill import run_backfill
from writer.redisio import connect

TOPOLOGY = """
event login
user := $.user as string
ip := $.ip as string?
amount := $.amount as float?
items := $.items as int ? 0
big := amount > 50
n_ip_10m := Count(by ip last 10 minutes)
n_ip_1d := Count(by ip last 1 day)
n_user_big_2h := Count(by user where big last 2 hours)
items_user := Sum(items by user last 1 day)
amount_user := Sum(amount by user)
avg_amount_ip := Average(amount by ip last 6 hours)
min_amount_user := Min(amount by user last 3 hours)
max_user_ip := Max(user by ip last 1 day)
uniq_users_ip := CountUnique(user by ip last 1 hour)
uniq_pairs := CountUnique(user, ip last 2 days)
last_ip := Latest(ip, items by user exclusive)
last_seen := LatestTime(by user exclusive)
first_ip := First(ip by user last 2 hours)
first_t := FirstTime(by ip last 1 day)
seq_ip := Sequence(ip by user last 3 hours)
seq_pair := Sequence(ip, amount by user limit 3)
set_ip := Set(ip by user last 1 day)
set_pair := Set(user, ip limit 5)
n_ip_lim := Count(by ip last 10 minutes limit 3)
latest_lim := Latest(items by user limit 2 exclusive)
d_count := DecayedCount(by user last 1 hour)
d_sum := DecayedSum(amount by ip last 10 minutes)
d_avg := DecayedAverage(items by user last 1 day)
hll_ip := HyperLogLog(user by ip last 1 day)
hll_pair := HyperLogLog(user, ip last 2 hours)
items_after := Sum(items by ip after last_seen last 1 day)
purchases_user := Count<purchase>(by user last 1 day)
spent_user := Sum<purchase>(total by user last 1 day)

event purchase
user := $.user as string
total := $.total as int
"""

START_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
SPLIT_MS = START_MS + 86_400_000 + 17 * 3_600_000 + 123_456  # not on a tile boundary


def make_events(n: int = 3500, seed: int = 7) -> list[dict]:
    return login_purchase_events(n, seed, START_MS)


def dump(url):
    client = connect(url)
    state = {}
    for key in client.scan_iter("sc:{*"):
        if client.type(key) == b"zset":
            state[key] = client.zrange(key, 0, -1, withscores=True)
        else:
            state[key] = {f: v for f, v in client.hgetall(key).items() if f not in (b"_p", b"_m", b"_c")}  # bookkeeping
    return state


@pytest.fixture(scope="module")
def plan():
    result = compile_sources({"t.scowl": TOPOLOGY})
    assert result.plan is not None, result.render()
    return result.plan


def test_backfill_then_online_equals_online_only(spark, store_url, plan, tmp_path):
    """On a single server and on a 3-master cluster (SPEC §5.1): executors write to the nodes of their keys."""
    redis_url = store_url
    events = make_events()
    history = [e for e in events if e["_time"] < SPLIT_MS]
    live = [e for e in events if e["_time"] >= SPLIT_MS]
    assert len(history) > 1000 and len(live) > 300

    online_only = post_all(plan, redis_url, events)[len(history):]

    connect(redis_url).flushall()
    path = tmp_path / "history.jsonl"
    path.write_bytes(b"\n".join(orjson.dumps(e) for e in history) + b"\n")
    report = run_backfill(spark, plan, [path], redis_url, start_ms=START_MS, end_ms=SPLIT_MS)
    assert report.events == len(history)
    after_first = dump(redis_url)
    assert after_first

    # idempotent: the same window again changes nothing (float sums to 1e-9: Spark's summation order)
    run_backfill(spark, plan, [path], redis_url, start_ms=START_MS, end_ms=SPLIT_MS)
    assert_same_store(dump(redis_url), after_first, plan)

    mixed = post_all(plan, redis_url, live)
    assert len(mixed) == len(online_only)
    for i, (a, b) in enumerate(zip(online_only, mixed)):
        diffs = {k: (a[k], b[k]) for k in a if not close(a[k], b[k])}
        assert not diffs, f"live event {i} ({live[i]}): {diffs}"


def test_backfill_sets_aside_bad_records(spark, redis_url, plan, tmp_path):
    path = tmp_path / "bad.jsonl"
    path.write_text(
        '{"_type": "login", "_time": "2024-01-01T00:00:00Z", "user": "a"}\n'
        'not json at all\n'
        '{"_type": "unknown", "_time": 5}\n'
        '{"_type": "login", "_time": "not a time", "user": "b"}\n'
        # two events joined without a newline: one invalid record, as the API answers that body 400
        '{"_type": "login", "_time": "2024-01-01T00:00:01Z", "user": "c"}{"_type": "login", "_time": 7, "user": "d"}\n'
    )
    report = run_backfill(spark, plan, [path], redis_url, rejected_dir=tmp_path / "rejected")
    assert report.events == 1
    assert report.rejected == 4
    rejected = "".join(p.read_text() for p in (tmp_path / "rejected").rglob("part-*"))
    assert "not json at all" in rejected and '"unknown"' in rejected and '"user": "c"}{' in rejected


def test_online_limit_is_a_raw_bucket_boundary_so_late_reads_count_backfilled_tiles(redis_url):
    """A backfill that leaves online writes intact stops at a raw-bucket boundary too (SPEC §3.3, §5.6).

    A late online read takes its own resolution tile from the online raw entries of that tile's
    raw bucket (15 s for 1-second states). For a window under 15 s the coarsest tile is 5 s, so a
    limit at the coarsest tile alone let a backfilled tile share a bucket with online writes, and a
    late read within the allowed lateness left it out. Windows of 15 s and more keep their limit."""
    import redis

    from compiler.algebra.lua import LuaGenerator, ReadSlot, RoundSpec, WriteSlot
    from compiler.algebra.ops import make_op
    from compiler.algebra.windows import LEVEL_CODE, levels_s, tile_index
    from writer.backfill import online_limit

    result = compile_sources({"t.scowl": "event e\nk := $.k as string\n"
                                         "short := Count(by k last 10 seconds)\nlong := Count(by k last 1 minute)\n"})
    assert result.plan is not None, result.render()
    by_window = {st.window_s: st for st in result.plan.states.values()}
    t0 = START_MS  # on a 15 s (and 1 min) boundary
    online_ms = t0 + 7_000
    assert online_limit(by_window[10], online_ms) == t0  # was t0 + 5 s: the coarsest tile alone
    assert online_limit(by_window[60], online_ms) == t0  # 1 min: a multiple of the 15 s bucket
    assert online_limit(by_window[60], t0 + 75_000) == t0 + 60_000

    gen, op = LuaGenerator(), make_op("Count", (), (), 10)
    writes = RoundSpec("w", writes=(WriteSlot(op, 10, 1),))
    read = RoundSpec("r", reads_after=(ReadSlot(op, 10, 1),))
    client = redis.Redis.from_url(redis_url)

    def late_read_after_backfill(backfilled_ms: int) -> int:
        key = f"t:{{{backfilled_ms}}}"
        client.delete(key)
        for size in levels_s(10):  # the backfilled tiles of one write (writer.sink: HSET of every level)
            client.hincrby(key, f"{LEVEL_CODE[size]}{tile_index(backfilled_ms, size)}", 1)
        for t in (online_ms, online_ms + 2_000):  # online writes from the online start
            client.eval(gen.script(writes), 3, "", "", key, t, "", "")
        res = client.eval(gen.script(read), 3, "", "", key, backfilled_ms + 300, "", "")
        assert res[0] & 2  # late
        return res[1]

    # backfilled writes in the last tiles a run may write, each read back late: counted
    lim = online_limit(by_window[10], online_ms)
    assert late_read_after_backfill(lim - 800) == 1
    assert late_read_after_backfill(lim - 4_999) == 1
    client.close()
