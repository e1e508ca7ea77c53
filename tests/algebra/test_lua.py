"""The generated round scripts (compiler.algebra.lua) against a brute-force fold (SPEC §2.4, §3.2, §5.2).

For every tiled function and value type, hypothesis draws writes in event-time
order and a read time; the writes go through a generated write script and the
read through a generated read script, run in the real test Redis. The value
must equal ``ops`` ``fold`` of exactly the writes the window rule of SPEC §3.2
counts: exactly, except float sums and averages, which tiles add in another
association than the fold (within 1e-12 of the sum of magnitudes). Also checked: integer
sums past 2**53 stay exact, and past 2**63 read as null (``common.lua``
``int_add_text`` against Python's ints), ``after`` bounds the range, a skipped (empty) key
reads null, a seen ``_id`` skips the writes, and a round with more hoisted
constants than Lua's local-variable limit still compiles.
"""

from __future__ import annotations

import gc
import uuid

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler.algebra.keys import RUNNING_SUFFIX
from compiler.algebra.lua import (MAX_LOCAL_CONSTS, LuaGenerator, ReadSlot, RoundSpec, WriteSlot, hll_merge,
                                  hll_read_estimate)
from compiler.algebra.ops import HLL_M, HLL_Q, fold, hll_estimate, log_every_ms, make_op, prune_every_ms
from compiler.algebra.script import common_script
from compiler.runtime import EvalError
from compiler.algebra.windows import resolution_s, tile_index

GEN = LuaGenerator()
T0 = 1_700_000_000_000

FUNCTIONS = [
    ("Count", ()), ("Sum", ("int",)), ("Sum", ("float",)), ("Average", ("float",)),
    ("Min", ("int",)), ("Min", ("float",)), ("Min", ("string",)), ("Max", ("int",)), ("Max", ("string",)),
    ("Max", ("time",)), ("First", ("string",)), ("FirstTime", ()), ("HyperLogLog", ("string",)),
]
WINDOWS = st.sampled_from([10, 60, 600, 3600, 86400, 7 * 86400])
VALUES = {
    # past 2**53 (exact sums are returned raw) and past 2**63 (null: fold's finalize too)
    "int": st.integers(min_value=-(2**63), max_value=2**63 - 1),
    "float": st.floats(min_value=-1e12, max_value=1e12, allow_nan=False),
    "string": st.text(max_size=4),
    "time": st.integers(min_value=0, max_value=10**13),
}


def write_read_scripts(client, op, window_s, late_ms):
    """The write slot of ``op`` at its window's resolution, and its write and read scripts (registered)."""
    r = resolution_s(window_s)
    w = WriteSlot(op, window_s, r)
    write = client.register_script(GEN.script(RoundSpec("w", writes=(w,), lateness_ms=late_ms)))
    read = client.register_script(GEN.script(RoundSpec("r", reads_after=(ReadSlot(op, window_s, r),),
                                                       lateness_ms=late_ms)))
    return w, write, read


def counted(writes, t_ms, window_s, after_ms=None):
    """The writes SPEC §3.2 counts for a read at ``t_ms``: T(s) > T(t - W), s <= t, T(s) > T(a)."""
    r = resolution_s(window_s)
    lo = tile_index(t_ms - window_s * 1000, r)
    out = []
    for s, vals in writes:
        if tile_index(s, r) > lo and s <= t_ms and (after_ms is None or tile_index(s, r) > tile_index(after_ms, r)):
            out.append((s, vals))
    return out


def run_round(client, spec, keys, argv):
    return client.eval(GEN.script(spec), len(keys), *keys, *argv)


def eval_and_fcall(client, script, name, calls):
    """Replies of ``calls`` (``[(keys, argv)]``) run in order as ``EVAL`` of ``script``, then, on a flushed
    store, as ``FCALL`` of its loaded function library ``name``: ``{"eval": [...], "fcall": [...]}``."""
    replies = {}
    for mode in ("eval", "fcall"):
        client.flushdb()
        replies[mode] = [client.eval(script, len(keys), *keys, *argv) if mode == "eval"
                         else client.execute_command("FCALL", name, len(keys), *keys, *argv)
                         for keys, argv in calls]
    return replies


@pytest.fixture()
def client(redis_url):
    c = redis.Redis.from_url(redis_url)
    yield c
    c.close()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), fn=st.sampled_from(FUNCTIONS), window_s=WINDOWS, with_after=st.booleans())
def test_generated_read_equals_fold(client, data, fn, window_s, with_after):
    function, vtypes = fn
    op = make_op(function, vtypes, ("v",) if vtypes else (), window_s)
    r = resolution_s(window_s)
    span = 3 * window_s * 1000
    times = sorted(data.draw(st.lists(st.integers(min_value=0, max_value=span), max_size=12)))
    # read before the latest writes: the exact cover, not the short one (a write lies in a tile
    # after the read's, _m > hi). The writes arrive latest first (so pruning at the latest time
    # cannot drop what the read counts), at distinct times (First's ties go by arrival), and the
    # read is at its tile's last ms (the cover counts all of tile hi: SPEC §3.3 late events, issue 12)
    early = data.draw(st.booleans(), label="read before the latest writes")
    if early:
        times = sorted(set(times))
    writes = [(T0 + s, tuple(data.draw(VALUES[t]) for t in vtypes)) for s in times]
    key = f"t:{{{uuid.uuid4().hex}}}"
    wslot = WriteSlot(op, window_s, r)
    wspec = RoundSpec("write", writes=(wslot,))
    for s, vals in (reversed(writes) if early else writes):
        run_round(client, wspec, ["", "", key], [s, "", "", *GEN.write_values(wslot, vals)])
    t = T0 + data.draw(st.integers(min_value=0, max_value=span + window_s * 1000))
    if early:
        t = (tile_index(t, r) + 1) * r * 1000 - 1
    else:
        t = max(t, writes[-1][0]) if writes else t
    after = T0 + data.draw(st.integers(min_value=0, max_value=span)) if with_after else None
    rslot = ReadSlot(op, window_s, r, has_after=with_after)
    argv = [t, "", ""] + ([after] if with_after else [])
    res = run_round(client, RoundSpec("read", reads_after=(rslot,)), ["", "", key], argv)
    assert res[0] & 1 == 1  # (bits 1-2: the read was late, SPEC §3.3)
    got = op.finalize(GEN.decode_read(rslot, res[1]))
    kept = counted(writes, t, window_s, after)
    want = fold(op, kept)
    if function in ("Sum", "Average") and vtypes == ("float",) and want is not None:
        assert got == pytest.approx(want, rel=0, abs=1e-12 * sum(abs(v[0]) for _, v in kept) + 1e-300)
    else:
        assert got == want


def test_int_sum_beyond_2_53_is_exact(client):
    op = make_op("Sum", ("int",), window_s=3600)
    w, rd = WriteSlot(op, 3600, 1), ReadSlot(op, 3600, 1)
    key = f"t:{{{uuid.uuid4().hex}}}"
    vals = [2**62, 2**62 - 1, -(2**40) + 3, 7]
    for i, v in enumerate(vals):
        run_round(client, RoundSpec("w", writes=(w,)), ["", "", key], [T0 + 1000 * i, "", "", *GEN.write_values(w, [v])])
    res = run_round(client, RoundSpec("r", reads_after=(rd,)), ["", "", key], [T0 + 5000, "", ""])
    assert isinstance(res[1], list)  # returned raw: too large for a double
    assert op.finalize(GEN.decode_read(rd, res[1])) == sum(vals)


BIG = st.one_of(st.integers(min_value=-(2**64), max_value=2**64),
                st.integers(min_value=-(10**40), max_value=10**40),
                st.integers(min_value=-(2**53) - 3, max_value=2**53 + 3))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(terms=st.lists(BIG, min_size=1, max_size=8))
def test_int_add_text_is_exact(client, terms):
    """``common.lua`` ``int_add_text`` folds canonical decimal texts to their exact sum, at any size."""
    script = common_script() + """
local acc = false
for i = 1, #ARGV do acc = int_add_text(acc, ARGV[i]) end
return acc"""
    got = client.eval(script, 0, *[str(x) for x in terms])
    assert got.decode() == str(sum(terms))


def test_int_sum_beyond_int64_reads_null_and_comes_back(client):
    """A tile's total leaves int64 and comes back: the read is null, then exact again (SPEC §3.5)."""
    op = make_op("Sum", ("int",), window_s=3600)
    w, rd = WriteSlot(op, 3600, 1), ReadSlot(op, 3600, 1)
    key = f"t:{{{uuid.uuid4().hex}}}"
    spec = RoundSpec("wr", writes=(w,), reads_after=(rd,))
    got = []
    for i, v in enumerate([2**62, 2**62, 2**63 - 1, -(2**63), -(2**62) - 5]):
        res = run_round(client, spec, ["", "", key, key], [T0 + 10 * i, "", "", *GEN.write_values(w, [v])])
        try:
            got.append(GEN.finisher(rd)(res[1], T0 + 10 * i, None))
        except EvalError as e:
            got.append(str(e))
    assert got == [2**62, "integer overflow", "integer overflow", 2**63 - 1, 2**62 - 6]
    # the running total (lua.py rs_write) is exact, past int64
    assert client.zrange(key + ":z", -1, -1)[0].split(b"|")[1] == str(2**62 - 6).encode()


def test_empty_key_skips_and_seen_id_skips_writes(client):
    op = make_op("Count", (), window_s=600)
    w, rd = WriteSlot(op, 600, 1), ReadSlot(op, 600, 1)
    spec = RoundSpec("wr", writes=(w,), reads_after=(rd, rd))
    key, idk = f"t:{{{uuid.uuid4().hex}}}", f"id:{{{uuid.uuid4().hex}}}"
    res = run_round(client, spec, [idk, "", key, key, ""], [T0, 60_000, ""])
    assert res == [1, 1]  # new id; one read (the empty key pushes nothing)
    res = run_round(client, spec, [idk, "", key, key, key], [T0 + 1, 60_000, ""])
    assert res == [0, 1, 1]  # seen id: not written again, both reads answered


def test_many_windows_in_one_round_compile(client):
    op = make_op("Average", ("float",), window_s=60)
    reads = tuple(ReadSlot(make_op("Average", ("float",), window_s=60 * k), 60 * k, resolution_s(60 * k))
                  for k in range(1, 2 * MAX_LOCAL_CONSTS))
    spec = RoundSpec("wide", reads_after=reads)
    keys = ["", ""] + [f"t:{{{uuid.uuid4().hex}}}"] * len(reads)
    res = run_round(client, spec, keys, [T0, "", ""])
    assert len(res) == 1 + len(reads)
    assert all(op.finalize(GEN.decode_read(rd, x)) is None for rd, x in zip(reads, res[1:]))


@pytest.mark.parametrize("lateness_s", [0, 90])
@pytest.mark.parametrize("fn", [("Count", ()), ("Average", ("float",)), ("CountUnique", ("string",)),
                                ("HyperLogLog", ("string",)), ("Max", ("float",))])
def test_writes_prune_what_no_later_read_can_use(client, fn, lateness_s):
    """SPEC §5.3, §3.3: a write drops, at most every (W + r + L)/2 (ops.prune_every_ms), the fields that end before
    t - W - r - L (L the allowed lateness); nothing else. Raw tiles of late reads (upper-case codes) go as
    soon as they end before t - L; CountUnique keeps one raw member per write of the last L."""
    function, vtypes = fn
    window_s, late_ms = 60, lateness_s * 1000
    op = make_op(function, vtypes, window_s=window_s)
    w = WriteSlot(op, window_s, 1)
    key = f"t:{{{uuid.uuid4().hex}}}"
    spec = RoundSpec("w", writes=(w,), lateness_ms=late_ms)
    t = T0
    for i in range(600):  # ten windows, one write a second
        t = T0 + 1000 * i
        run_round(client, spec, ["", "", key], [t, "", "", *GEN.write_values(w, [f"v{i % 7}" if vt == "string" else i / 4 for vt in vtypes])])
    cutoff = t - window_s * 1000 - 1000 - late_ms
    if function in ("Count", "Average"):  # running totals in the sorted set <key>:z (pc_write); no hash
        assert not client.exists(key)
        members = client.zrange(key + ":z", 0, -1, withscores=True)
        scores = [score for _, score in members]
        # one member per write (one a second: nothing to thin) after the cutoff, and one read's base at most before
        assert len([x for x in scores if x > cutoff]) == 61 + lateness_s
        assert len(scores) - (61 + lateness_s) <= 1 + prune_every_ms(window_s, 1, late_ms) // 1000
        last = members[-1][0].split(b"|")[-1].split(b" ")[0]  # the running count of the writes
        assert int(last) == 600
        assert 0 < client.pttl(key + ":z") <= window_s * 1000 + 1000
        rd = ReadSlot(op, window_s, 1)
        res = run_round(client, RoundSpec("r", reads_after=(rd,), lateness_ms=late_ms), ["", "", key], [t, "", ""])
        assert GEN.write_counter(rd)(res[1]) == 60
        return
    if function == "Max":  # a monotonic deque and popped members in <key>:z (mx_write); no hash
        assert not client.exists(key)
        members = client.zrange(key + ":z", 0, -1, withscores=True)
        deque = [(m, score) for m, score in members if score < 2**49]
        popped_ng = [score - 2**50 for _, score in members if score >= 2**49]
        # each write (i / 4, rising) popped the one before it: the deque is the newest write alone ...
        assert deque == [(f"{t}|{599 / 4!r}".encode(), t)]
        # ... and the popped writes are kept while a read up to L late can see them (their popper after t - L),
        # plus up to a pruning period of slack
        every_ms = prune_every_ms(window_s, 1, late_ms)
        assert popped_ng and min(popped_ng) > t - late_ms - every_ms - 1000 and max(popped_ng) == t
        assert len(popped_ng) >= lateness_s
        assert 0 < client.pttl(key + ":z") <= window_s * 1000 + 1000
        rd = ReadSlot(op, window_s, 1)
        for back_s in (0, 1, lateness_s):  # reads up to L late: the newest write at or before their time
            res = run_round(client, RoundSpec("r", reads_after=(rd,), lateness_ms=late_ms), ["", "", key],
                            [t - 1000 * back_s, "", ""])
            assert op.finalize(GEN.decode_read(rd, res[1])) == (599 - back_s) / 4
        return
    if function == "CountUnique":  # a sorted set, pruned once a period: at most a period's writes before the cutoff
        members = client.zrange(key, 0, -1, withscores=True)
        tuples = [score for m, score in members if m.startswith(b"u")]
        raw = [score - 2**50 for m, score in members if m.startswith(b"R")]
        every_ms = prune_every_ms(window_s, 1, late_ms)
        assert tuples and min(tuples) > cutoff and len(tuples) == 7
        # one raw member per write, kept as the tuples
        assert 61 + lateness_s <= len(raw) <= 61 + lateness_s + every_ms // 1000 + 1 and min(raw) > cutoff - every_ms
        assert 0 < client.pttl(key) <= window_s * 1000 + 1000
        rd = ReadSlot(op, window_s, 1)
        assert run_round(client, RoundSpec("r", reads_after=(rd,), lateness_ms=late_ms), ["", "", key],
                         [t, "", ""])[1] == 7
        return
    fields = client.hgetall(key)
    every_ms = prune_every_ms(window_s, 1, late_ms)
    sizes = {"s": 1000, "a": 5000, "b": 15000, "m": 60000}
    oldest_end = None
    raw_ends = []
    for f, v in fields.items():
        f = f.decode()
        if f in ("_p", "_m", "_c", "_t", "_r"):  # bookkeeping: next pass, latest tile and ms, cursor, raw start
            continue
        idx = int(f[1:].split(".")[0])
        if f[0] == "B":  # raw bucket (15 s) of late reads
            raw_ends.append((idx + 1) * 15_000)
            continue
        end = (idx + 1) * sizes[f[0]]
        oldest_end = end if oldest_end is None else min(oldest_end, end)
    assert oldest_end is not None and oldest_end > cutoff - every_ms - 1000
    assert oldest_end <= cutoff + 60_000  # and what reads up to L late need is kept
    # raw buckets (15 s) of the last L, and at most 4 more (deleted 4 at a time: lua.py RAW_BATCH)
    assert lateness_s // 15 <= len(raw_ends) <= lateness_s // 15 + 1 + 4
    assert min(raw_ends) > t - late_ms - 5 * 15_000 and max(raw_ends) > t
    assert 0 < client.pttl(key) <= window_s * 1000 + 1000
    # and the newest window is whole: the read still counts every write in it
    if function == "Count":
        rd = ReadSlot(op, window_s, 1)
        res = run_round(client, RoundSpec("r", reads_after=(rd,)), ["", "", key], [t, "", ""])
        assert res[1] == window_s


def _log_rig(client, window_s, resolution_s, n, late_ms):
    """A ``Sequence ... limit n`` write log on a fresh key: ``(key, put(t, v), latest(t), got(t))``: put writes v
    at t (ms) through its round script; latest is the n latest writes a read at t counts (the oracle, as
    ``(ms, json)`` newest first); got is what the read round answers at t, in the same shape."""
    op = make_op("Sequence", ("string",), ("v",), window_s)
    w, rd = WriteSlot(op, window_s, resolution_s, limit=n), ReadSlot(op, window_s, resolution_s, limit=n)
    write = RoundSpec("w", writes=(w,), lateness_ms=late_ms)
    read = RoundSpec("r", reads_after=(rd,), lateness_ms=late_ms)
    key = f"t:{{{uuid.uuid4().hex}}}"
    writes = []

    def put(t, v):
        writes.append((t, v))
        run_round(client, write, ["", "", key], [t, "", "", *GEN.write_values(w, [v])])

    def latest(t):  # the n latest counted writes, newest first, as (ms, json) pairs
        counted_writes = sorted(counted(writes, t, window_s), key=lambda x: x[0])
        return [(s, GEN.write_values(w, [v])[0]) for s, v in counted_writes[-n:]][::-1]

    def got(t):
        res = run_round(client, read, ["", "", key], [t, "", ""])[1]
        return [(int(float(res[j + 1])), res[j].decode().split(":", 1)[1]) for j in range(0, len(res), 2)]

    return key, put, latest, got


@pytest.mark.parametrize("lateness_s", [0, 90])
def test_a_write_log_is_trimmed_once_a_period_and_reads_keep_the_n_latest(client, lateness_s):
    """SPEC §3.3, §5.3: an online write log (``limit n``) drops what no read at t - L or later can use (members
    before t - W - r - L; before t - L all but the n latest) at the first write of each period of L / 2
    (ops.log_every_ms) and at a late write, not at every write: it holds at most one period of writes more.
    Reads, at t and up to L late, and after a late write, are the n latest writes the window counts."""
    window_s, n, late_ms = 60, 3, lateness_s * 1000
    key, put, latest, got = _log_rig(client, window_s, 1, n, late_ms)
    every_ms = log_every_ms(late_ms)
    assert every_ms == late_ms // 2
    sizes = []
    for i in range(400):  # one write a second, in time order
        t = T0 + 1000 * i
        put(t, f"v{i}")
        sizes.append(client.zcard(key))
        if i % 37 == 0:
            for back_s in ({0, 1, lateness_s} if lateness_s else {0}):
                assert got(t - 1000 * back_s) == latest(t - 1000 * back_s)
    t = T0 + 1000 * 399
    if lateness_s:
        # the writes of the last L and the n latest before them, plus at most one period (and this write)
        assert max(sizes[200:]) <= lateness_s + n + every_ms // 1000 + 1
        # between two trims the log only grows: no write of a period after its first trims
        assert any(b > a for a, b in zip(sizes[200:], sizes[201:]))
        assert min(sizes[200:]) >= lateness_s + n
    else:
        assert max(sizes) <= n + 1  # trimmed at every write
    assert 0 < client.pttl(key) <= window_s * 1000 + 1000
    # a late write (within L) is counted by reads at and after its time, and trims the log at its own time
    if lateness_s:
        put(t - 40_000, "late")  # the time of an earlier write: ranked after it
        assert client.zcard(key) <= lateness_s + 40 + n + 2
        for at in (t - 40_000, t - 39_000, t):
            assert got(at) == latest(at)


def test_a_sparse_write_log_keeps_its_n_latest_and_reads_them_up_to_l_late(client):
    """SPEC §3.3, §5.3: a log written less than once per L (an aircraft's flights) trims by rank alone at each
    write: it keeps the write and the n latest before it, and reads at t, up to L late and after a late write
    are the n latest writes the window counts."""
    window_s, n, late_ms = 3600, 2, 90_000
    key, put, latest, got = _log_rig(client, window_s, 60, n, late_ms)
    for i in range(12):  # one write every 20 minutes, more than L apart
        t = T0 + 1_200_000 * i
        put(t, f"v{i}")
        assert client.zcard(key) == min(i + 1, n + 1)
        for back_ms in (0, 1000, late_ms):
            assert got(t - back_ms) == latest(t - back_ms)
    assert 0 < client.pttl(key) <= (window_s + 60) * 1000
    put(t - 60_000, "late")  # within L of the newest write
    for at in (t - 60_000, t):
        assert got(at) == latest(at)
    assert client.zcard(key) <= n + 2


def test_late_writes_into_pruned_time_stay_bounded(client):
    """Tiles a late write leaves behind the pruned time are deleted once the hash outgrows its bound."""
    window_s = 60
    op = make_op("HyperLogLog", ("int",), ("v",), window_s=window_s)  # in the ladder
    w = WriteSlot(op, window_s, 1)
    key = f"t:{{{uuid.uuid4().hex}}}"
    spec = RoundSpec("w", writes=(w,), lateness_ms=0)  # the late writes are beyond the allowed lateness
    most, writes = 0, []
    for i in range(1200):  # twenty windows; every other write is two windows late
        t = T0 + 1000 * i - (2 * window_s * 1000 if i % 2 else 0)
        run_round(client, spec, ["", "", key], [t, "", "", *GEN.write_values(w, [i])])
        writes.append((t, (i,)))
        most = max(most, client.hlen(key))
    # the bound of lua.py's prune_levels: twice the fields of W + r + one pass, plus what
    # the writes between two passes (every 30.5 s: 61 writes here, 4 levels each) add
    every, keep = prune_every_ms(window_s, 1, 0), 61_000
    max_len = sum(((keep + every) // (z * 1000) + 2) for z in (1, 5, 15, 60)) + 4
    assert most <= 2 * max_len + every // 500 * 4 + 1
    rd = ReadSlot(op, window_s, 1)
    t = T0 + 1000 * 1198
    res = run_round(client, RoundSpec("r", reads_after=(rd,)), ["", "", key], [t, "", ""])
    window = counted(writes, t, window_s)  # the on-time writes of the last window, 1140 to 1198
    assert sorted(v for _, (v,) in window) == list(range(1140, 1199, 2))
    assert op.finalize(GEN.decode_read(rd, res[1])) == fold(op, window)


@pytest.mark.parametrize("gap_s", [7, 40])
def test_raw_buckets_of_a_key_written_rarely_wait_for_the_pass_and_late_reads_stay_exact(client, gap_s):
    """Raw buckets (15 s) of a key written less than once a bucket are deleted by the pruning pass, not by
    name (lua.py book): they stay bounded by the allowed lateness plus a pass period, and every read up
    to the allowed lateness late counts exactly the writes SPEC §3.2 counts (SPEC §3.3)."""
    window_s, late_ms = 600, 120_000
    op = make_op("HyperLogLog", ("int",), ("v",), window_s=window_s)  # in the ladder: a late read takes the raw entries
    w = WriteSlot(op, window_s, 1)
    key = f"t:{{{uuid.uuid4().hex}}}"
    spec = RoundSpec("w", writes=(w,), lateness_ms=late_ms)
    writes = []
    for i in range(3 * 3600 // gap_s):  # three hours: many pruning passes (every 361 s)
        t = T0 + gap_s * 1000 * i + (i * 7919) % 1000
        run_round(client, spec, ["", "", key], [t, "", "", *GEN.write_values(w, [i])])
        writes.append((t, (i,)))
    every = prune_every_ms(window_s, 1, late_ms)
    raw = [int(f[1:]) for f in client.hkeys(key) if f.startswith(b"B")]
    # the raw buckets of the last L, and those older ones the pass has not reached yet (one per write)
    assert min(raw) * 15_000 >= t - late_ms - every - 2 * 15_000 - 1000
    assert len(raw) <= (late_ms + every) // (gap_s * 1000) + 4 + 2
    if gap_s > 15:
        assert len(raw) > late_ms // (gap_s * 1000) + 4  # (the pass, not names, deleted them)
    rd = ReadSlot(op, window_s, 1)
    for back_ms in (0, 1, 999, gap_s * 1000 - 1, 61_000, late_ms - 1):
        r_t = t - back_ms
        res = run_round(client, RoundSpec("r", reads_after=(rd,), lateness_ms=late_ms), ["", "", key],
                        [r_t, "", ""])
        assert op.finalize(GEN.decode_read(rd, res[1])) == fold(op, counted(writes, r_t, window_s)), back_ms


@pytest.mark.parametrize("fn,window_s", [(("HyperLogLog", ("int",)), 86400), (("HyperLogLog", ("string",)), 86400),
                                         (("HyperLogLog", ("float",)), 90 * 86400)])
def test_a_hot_keys_raw_buckets_go_in_chunks_and_late_reads_stay_exact(client, fn, window_s):
    """A key written 5 times a second fills its raw buckets (60 s at a 1-minute resolution, 1 hour at 1 hour)
    with far more than one chunk (lua.py raw_append): each field stays near RAW_CHUNK (2 KB), so a write
    copies at most two chunks, not its bucket (bench/hotkey.py); every read up to the allowed lateness
    late still counts exactly the writes SPEC §3.2 and §3.3 count, from all the chunks of its bucket; and
    buckets deleted by name (a key written more than once a bucket) leave none of their chunks behind."""
    function, vtypes = fn
    late_ms = 120_000
    op = make_op(function, vtypes, ("v",) if vtypes else (), window_s)
    r = resolution_s(window_s)
    w, write, read = write_read_scripts(client, op, window_s, late_ms)
    key = f"t:{{{uuid.uuid4().hex}}}"
    writes = []
    for i in range(3000):  # ten minutes, 5 writes a second
        t = T0 + 200 * i + 7
        vals = (f"v{i}",) if vtypes == ("string",) else (i,) if vtypes == ("int",) else (i / 4,) if vtypes else ()
        write(keys=["", "", key], args=[t, "", "", *GEN.write_values(w, vals)])
        writes.append((t, vals))
    raw = {f.decode(): v for f, v in client.hgetall(key).items() if f[:1].isupper()}
    chunks = [f for f in raw if "." in f]
    # (a closed chunk's summary, <bucket>.p<k>, holds the registers of its entries: it may be larger)
    assert len(chunks) > 3 and max(len(v) for f, v in raw.items() if ".p" not in f) < 2048 + 200
    # no chunk outlives its bucket's first field (deleted together, by name or by the pass)
    assert {f.split(".")[0] for f in chunks} <= set(raw)
    if r == 60:  # 60 s buckets of the last L, and at most 4 more (lua.py RAW_BATCH)
        assert len(set(raw)) - len(chunks) <= late_ms // 60_000 + 1 + 4
    for back_ms in (0, 1, 199, 1_000, 30_001, 59_999, 61_000, late_ms - 1):
        r_t = t - back_ms
        res = read(keys=["", "", key], args=[r_t, "", ""])
        assert res[0] & 2 == (2 if back_ms else 0)  # a late read: the state holds a later write
        got = op.finalize(GEN.decode_read(ReadSlot(op, window_s, r), res[1]))
        want = fold(op, counted(writes, r_t, window_s))
        assert got == want, back_ms


#: every function whose raw entries a closed chunk summarizes (lua.py raw_partial: its pk) and the Decayed kinds
HOT_FUNCTIONS = FUNCTIONS + [("DecayedCount", ()), ("DecayedSum", ("float",)), ("DecayedAverage", ("float",))]


def _hot_value(vtype, rng):
    """A random value of ``vtype``; floats positive (no cancellation: partials add in another association)."""
    if vtype == "int":
        return rng.choice([rng.randint(-1000, 1000), rng.randint(-(2**62), 2**62)])
    if vtype == "float":
        return rng.randint(1, 10**6) / 64
    if vtype == "string":
        # thousands of distinct strings (a HyperLogLog's registers outgrow the cumulative partial's cap),
        # and now and then the empty one (a Min's value: not 'none')
        if rng.random() < 0.01:
            return ""
        return rng.choice(["", "a", "b c", "zz", "\t", "é"]) + str(rng.randint(0, 9999))
    return rng.randint(0, 10**13)


@pytest.mark.parametrize("legacy", [False, True], ids=["summaries", "upgraded"])
@pytest.mark.parametrize("window_s", [60, 86400], ids=["r1s-bucket15s", "r1min-bucket60s"])
@pytest.mark.parametrize("fn", HOT_FUNCTIONS, ids=lambda f: f[0] + "".join(f[1]))
def test_late_reads_of_a_hot_key_use_chunk_summaries_and_stay_exact(client, fn, window_s, legacy):
    """One key written every 10 ms of event time, in an arrival order up to 1.5 s off time order, fills
    its raw buckets (15 s at a 1-second resolution, whose tiles lie inside a bucket; 60 s at 1 minute)
    with dozens of chunks. Every closed chunk gets its summary (lua.py raw_close: field <bucket>.p<k>;
    a Decayed tile that closed a chunk also its total, <bucket>.t), and reads up to the allowed lateness late, which take the
    closed chunks that lie wholly in their range by their partials (raw_scan), equal the fold of exactly
    the writes SPEC §3.2 and §3.3 count. ``upgraded``: halfway, the summaries and totals are deleted, as
    in a store chunked before they were kept (2673a9b to 23bfa37); reads stay exact there too."""
    import random

    function, vtypes = fn
    rng = random.Random(f"{function}{vtypes}{window_s}{legacy}")
    late_ms = 120_000
    op = make_op(function, vtypes, ("v",) if vtypes else (), window_s)
    decayed = function.startswith("Decayed")
    r = resolution_s(window_s)
    w, write, read = write_read_scripts(client, op, window_s, late_ms)
    rslot = ReadSlot(op, window_s, r)
    key = f"t:{{{uuid.uuid4().hex}}}"
    n = 2000
    arrivals = []
    for i in range(n):  # 20 s of event time, each write moved back by up to 1.5 s
        t = T0 + 10 * i - rng.randint(0, 1500)
        arrivals.append((t, tuple(_hot_value(v, rng) for v in vtypes)))
    # running totals (First: each tile's earliest write) in <key>:z, no raw entries (pc_write, fi_write)
    running = function in ("Count", "Sum", "Average", "First", "FirstTime", "Min", "Max") or decayed
    for i, (t, vals) in enumerate(arrivals):
        if legacy and i == n // 2 and not running:
            dropped = [f for f in client.hkeys(key) if f[:1].isupper() and (b".p" in f or f.endswith(b".t"))]
            assert dropped
            client.hdel(key, *dropped)
        write(keys=["", "", key], args=[t, "", "", *GEN.write_values(w, vals)])
    if running:
        # one member per write within L (Sum, Average: per event time)
        assert not client.exists(key) and 0 < client.zcard(key + ":z") <= n
    else:
        fields = {f.decode(): v for f, v in client.hgetall(key).items() if f[:1].isupper()}
        firsts = {f: v for f, v in fields.items() if "." not in f}
        chunked = {f: int(v[1:v.index(b" ")]) for f, v in firsts.items() if v.startswith(b"#")}
        assert sum(chunked.values()) >= 10  # dozens of closed chunks
        for f, j in chunked.items():
            assert all(f"{f}.{k}" in fields for k in range(1, j + 1))
            summaries = [k for k in range(j) if f"{f}.p{k}" in fields]
            # a summary for every closed chunk; upgraded: for those closed after the upgrade
            assert summaries == list(range(j - len(summaries) if legacy else 0, j)), f
        if decayed and not legacy:  # a total for each tile that closed a chunk, and only for those
            assert {f[:-2] for f in fields if f.endswith(".t")} == set(chunked)
    in_time_order = sorted(arrivals, key=lambda a: a[0])  # stable: ties by arrival
    latest = in_time_order[-1][0]
    reads = [latest - rng.randint(0, 25_000) for _ in range(40)] + [latest, latest - 1, T0 + 10_000 - 1]
    for r_t in reads:
        res = read(keys=["", "", key], args=[r_t, "", ""])
        assert res[0] & 2 == (2 if r_t < latest else 0)
        if decayed:
            ir = None
            for s, vals in in_time_order:
                if s <= r_t:
                    ir = op.update(ir, vals, s)
            got, want = GEN.finisher(rslot)(res[1], r_t, None), op.value_at(ir, r_t)
            assert got == (want if want is None else pytest.approx(want, rel=1e-12)), r_t
            continue
        got = op.finalize(GEN.decode_read(rslot, res[1]))
        want = fold(op, counted(in_time_order, r_t, window_s))
        if function in ("Sum", "Average") and vtypes == ("float",) and want is not None:
            assert got == pytest.approx(want, rel=1e-12), r_t
        else:
            assert got == want, r_t


def hour_hll_writer(client):
    """A 1-hour HyperLogLog of ints at 1 s, the one function that keeps the tile ladder online (the others keep
    running members, lua.py pc_write ... mx_write), each write of its event time's second: its op, a fresh
    key and its write script (registered)."""
    op = make_op("HyperLogLog", ("int",), ("v",), window_s=3600)
    w = WriteSlot(op, 3600, 1)
    script = client.register_script(GEN.script(RoundSpec("w", writes=(w,), lateness_ms=0)))

    def write(keys, args, client=None):
        return script(keys=keys, args=[*args, *GEN.write_values(w, [int(args[0]) // 1000])], client=client)

    return op, f"t:{{{uuid.uuid4().hex}}}", write


def test_pruning_a_large_hash_keeps_it_bounded_pass_after_pass(client):
    """Passes over a hash of thousands of tiles (HSCAN steps, one per write) end long before the next is
    due and leave nothing older than their cutoff (SPEC §5.3)."""
    window_s = 3600
    op, key, script = hour_hll_writer(client)
    every_ms, keep_ms = prune_every_ms(window_s, 1, 0), window_s * 1000 + 1000
    steps, oldest_seen, pipe = 0, [], client.pipeline(transaction=False)
    for i in range(3 * window_s):  # three windows, one write a second
        script(keys=["", "", key], args=[T0 + 1000 * i, "", ""], client=pipe)
        if i % 600 == 599 or i == 3 * window_s - 1:
            pipe.execute()
            pipe = client.pipeline(transaction=False)
            cursor = client.hget(key, "_c")
            steps += cursor is not None
            ends = [(int(f[1:]) + 1) * 1000 for f in client.hkeys(key) if f.startswith(b"s")]
            oldest_seen.append((T0 + 1000 * i, min(ends)))
    t = T0 + 1000 * (3 * window_s - 1)
    # a pass over ~4.5k fields takes ~20 writes: each pass ended well before the next was due ...
    assert client.hget(key, "_c") is None and steps == 0
    # ... and left nothing older than the cutoff of its start, the last pass at most one period ago
    for at, oldest in oldest_seen[2:]:
        assert oldest > at - keep_ms - every_ms - 1000
    assert client.hlen(key) < 2 * (window_s + every_ms // 1000)
    rd = ReadSlot(op, window_s, 1)  # the window's oldest second is still there: the registers of all its writes
    res = run_round(client, RoundSpec("r", reads_after=(rd,)), ["", "", key], [t, "", ""])
    writes = [(T0 + 1000 * i, ((T0 + 1000 * i) // 1000,)) for i in range(3 * window_s)]
    assert op.finalize(GEN.decode_read(rd, res[1])) == fold(op, counted(writes, t, window_s))
    assert len(counted(writes, t, window_s)) == window_s


def test_a_pass_under_way_goes_on_one_step_per_write(client):
    """The cursor of a pass under way (_c) advances with each write and is dropped when the pass ends."""
    window_s = 3600
    _, key, script = hour_hll_writer(client)
    # 3000 stale one-second tiles, two windows old, and a pass due now
    client.hset(key, mapping={**{f"s{T0 // 1000 + i}": 1 for i in range(3000)}, "_p": 0,
                              "_m": T0 // 1000 + 3000})
    t = T0 + 2 * window_s * 1000 + 5_000_000
    cursors = []
    for i in range(40):
        script(keys=["", "", key], args=[t + i, "", ""])
        cursors.append(client.hget(key, "_c"))
        if cursors[-1] is None:
            break
    assert len(cursors) > 5 and all(c is not None for c in cursors[:-1]) and cursors[-1] is None
    assert client.hlen(key) < 40  # the stale tiles are gone; the new write's levels and bookkeeping stay


PASS_SIZES = {"s": 1000, "a": 5000, "m": 60000, "d": 86400000}


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(fields=st.lists(st.tuples(st.sampled_from(sorted(PASS_SIZES)), st.integers(-10**6, 10**12),
                                 st.sampled_from(["", ".s", ".c"])), max_size=300),
       cutoff=st.one_of(st.integers(-10**9, 10**15), st.sampled_from([0, 999, 1000, 10**12, 10**12 - 1, -1000])))
def test_a_pruning_pass_deletes_exactly_the_tiles_ending_by_its_cutoff(client, fields, cutoff):
    """A whole pass of prune_step (HSCAN steps, then text comparison of the tile index, parsed only below 0)
    deletes a tile field iff (index + 1) * size <= cutoff, across digit-count changes and negative indices,
    and leaves every other field (bookkeeping, CountUnique's u*, Decayed's d*)."""
    from compiler.algebra.lua import _PRELUDE
    from compiler.algebra.script import common_script

    src = common_script() + _PRELUDE + "return prune_step(KEYS[1], ARGV[1], tonumber(ARGV[2]))"
    key = f"t:{{{uuid.uuid4().hex}}}"
    names = {f"{code}{idx}{comp}" for code, idx, comp in fields} | {"_p", "_m", "_c", "uab", "dt", "dv", "lt"}
    client.hset(key, mapping={n: 1 for n in names})
    cursor, steps = "0", 0
    while True:
        cursor = client.eval(src, 1, key, cursor, cutoff)
        steps += 1
        if cursor in (b"0", "0") or steps > 100:
            break
    left = {f.decode() for f in client.hkeys(key)}
    want = {n for n in names
            if not (n[0] in PASS_SIZES and n[1:2] in set("-0123456789")
                    and (int(n[1:].split(".")[0]) + 1) * PASS_SIZES[n[0]] <= cutoff)}
    assert left == want


@settings(max_examples=200, deadline=None)
@given(tiles=st.lists(st.dictionaries(st.integers(0, 2**14 - 1), st.integers(1, 53), max_size=30), max_size=12),
       as_str=st.booleans())
def test_hll_merge_is_the_register_wise_max(tiles, as_str):
    texts = ["".join(f";{s}:{r}" for s, r in t.items()) for t in tiles]
    want: dict[int, int] = {}
    for t in tiles:
        for s, r in t.items():
            want[s] = max(want.get(s, 0), r)
    for _ in range(2):  # parsed, then from the cache of parsed tiles
        assert hll_merge(texts if as_str else [x.encode() for x in texts]) == want


def test_hll_tile_cache_stays_bounded_and_holds_only_long_texts(monkeypatch):
    """Texts of ``_HLL_CACHED_BYTES`` or more are kept parsed (``_hll_arrays``), up to ``_HLL_ARRAYS_MAX_BYTES``
    of arrays, for ``hll_merge`` and ``hll_read_estimate`` alike; shorter ones are parsed at each read and not
    kept."""
    import compiler.algebra.lua as lua

    monkeypatch.setattr(lua, "_HLL_ARRAYS", {})
    monkeypatch.setattr(lua, "_HLL_ARRAYS_HELD", [0])
    monkeypatch.setattr(lua, "_HLL_ARRAYS_MAX_BYTES", 2_000)
    for i in range(50):
        regs = {1000 + (i * 97 + j) % 3000: j % 9 + 1 for j in range(40)}
        text = "".join(f";{s}:{r}" for s, r in regs.items()).encode()
        assert len(text) >= lua._HLL_CACHED_BYTES
        if i % 2:
            assert hll_merge([text]) == regs
        else:
            assert hll_read_estimate([text, text]) == hll_estimate(regs)
        held = sum(a.nbytes + len(t) + lua._HLL_ENTRY_BYTES for t, a in lua._HLL_ARRAYS.items())
        assert held == lua._HLL_ARRAYS_HELD[0] <= 2_000
        assert text in lua._HLL_ARRAYS
    assert len(lua._HLL_ARRAYS) < 50  # it started over
    short = b";1:2;3:4"
    assert hll_merge([short]) == {1: 2, 3: 4} and short not in lua._HLL_ARRAYS
    assert gc.is_tracked(lua._HLL_ARRAYS) is False  # no cyclic-GC walk of its entries


REGISTERS = st.dictionaries(st.integers(0, HLL_M - 1), st.integers(1, HLL_Q + 1), max_size=400)


@settings(max_examples=150, deadline=None)
@given(tiles=st.lists(REGISTERS, max_size=8), repeat=st.booleans(), as_str=st.booleans())
def test_hll_read_estimate_is_the_estimate_of_the_merged_registers(tiles, repeat, as_str):
    """A HyperLogLog read's finisher (``hll_read_estimate``: register arrays from ``_HLL_DENSE_BYTES`` of text
    on) answers ``hll_estimate(hll_merge(texts))`` exactly, for short and long texts, a tile read twice in one
    cover, and again from its caches (parsed texts; a sparse read's estimate per sorted register values)."""
    texts = [("".join(f";{s}:{r}" for s, r in t.items())).encode() for t in tiles]
    if repeat and texts:
        texts.append(texts[0])
    want = hll_estimate(hll_merge(texts))
    for _ in range(2):
        assert hll_read_estimate([x.decode() for x in texts] if as_str else texts) == want


def test_shake_keeps_what_the_body_reaches_and_drops_the_rest():
    """script.shake keeps a top-level local if the body or a kept statement names it (transitively, with
    the comment above it) and drops the others, in source order."""
    from compiler.algebra.script import shake

    prelude = ("-- a: uses b\nlocal function a() return b() end\n"  # names b before b: kept only via c
               "local function b() return 1 end\n"
               "-- c calls a\nlocal function c() return a() end\n"
               "local X, Y = {}, 0\n"
               "-- unused\nlocal function d() return X end\n")
    kept = shake(prelude, "return c() + Y")
    assert "local function c()" in kept and "local function a()" in kept and "local function b()" in kept
    assert "local X, Y" in kept and "function d" not in kept and "-- unused" not in kept
    assert kept.index("function a") < kept.index("function b") < kept.index("function c")
    assert shake(prelude, "return 1") == ""


def test_shake_does_not_keep_a_function_a_comment_names():
    """A name in a comment (above a statement or after code) keeps nothing: each kept function costs a
    closure per call; a '--' inside a string literal starts no comment, so names after it still count."""
    from compiler.algebra.script import shake

    prelude = ("local function e() return 2 end\n"
               "local function f() return 3 end\n"
               "local function g() return 4 end\n"
               "-- c, see e (a comment)\nlocal function c() return 1 end  -- not f either\n"
               "local function h() return '--' .. g() end\n")
    kept = shake(prelude, "return c() -- e\n")
    assert "local function c()" in kept
    assert "function e" not in kept and "function f" not in kept and "function g" not in kept
    kept = shake(prelude, "return h()")
    assert "local function h()" in kept and "local function g()" in kept and "function c" not in kept


def test_generated_scripts_keep_every_shared_function_they_name():
    """Every name a generated round uses that the shared prelude (common.lua + the generator's) defines is
    defined in the script (a dropped one would be a global: an error when the script reaches it)."""
    import re

    from compiler.algebra.lua import _PRELUDE
    from compiler.algebra.script import _chunks, common_script

    defined = set().union(*(names for names, _ in _chunks(common_script() + _PRELUDE)))
    fns = [("Count", ()), ("Sum", ("int",)), ("Sum", ("float",)), ("Average", ("float",)), ("Min", ("float",)),
           ("Max", ("string",)), ("First", ("int",)), ("HyperLogLog", ("string",)), ("CountUnique", ("string",)),
           ("DecayedSum", ("float",)), ("Latest", ("int",))]
    sizes = []
    for fn, vt in fns:
        op = make_op(fn, vt, window_s=3600)
        spec = RoundSpec("r", reads_before=(ReadSlot(op, 3600, 1),), writes=(WriteSlot(op, 3600, 1),),
                         reads_after=(ReadSlot(op, 3600, 1, has_after=True),))
        src = GEN.script(spec)
        own = set(re.findall(r"^local\s+function\s+(\w+)", src, re.M))
        own |= {n.strip() for m in re.findall(r"^local\s+([\w\s,]+?)\s*=", src, re.M) for n in m.split(",")}
        used = set(re.findall(r"[A-Za-z_]\w*", re.sub(r"--[^\n]*", "", src)))
        assert (used & defined) <= own, (fn, sorted((used & defined) - own))
        sizes.append(len(src))
    full = len(common_script()) + len(_PRELUDE)
    assert min(sizes) < full / 2  # most of the shared prelude is left out of a one-function round


def test_only_latest_states_keep_the_latest_write_function():
    """common.lua's ``latest()`` (the write of ``Latest*`` states) is kept only in scripts that write one:
    the late-event bookkeeping's variables once shared its name, and every tiled script kept its closure."""
    import re

    def kept(fn: str, vt: tuple) -> set[str]:
        op = make_op(fn, vt, window_s=3600)
        src = GEN.script(RoundSpec("r", reads_before=(ReadSlot(op, 3600, 1),), writes=(WriteSlot(op, 3600, 1),)))
        return set(re.findall(r"^local\s+function\s+(\w+)", src, re.M))

    assert "latest" in kept("Latest", ("int",))
    for fn, vt in [("Count", ()), ("Sum", ("float",)), ("Max", ("string",)), ("DecayedSum", ("float",)),
                   ("CountUnique", ("string",))]:
        assert "latest" not in kept(fn, vt), fn


def test_a_hot_counts_members_are_thinned_to_one_a_tile_past_the_allowed_lateness(client):
    """A Count keeps one running-total member per write for the last L only (lua.py pc_thin): members of tiles
    that ended before t - L are thinned to the newest of each tile, so a key written 5 times a second holds
    ~L x 5 + (W + L) / r members, not one per write of the window; reads up to L late, and reads at every
    tile edge, still count exactly the writes SPEC §3.2 and §3.3 count."""
    window_s, late_ms = 3600, 60_000
    op = make_op("Count", (), window_s=window_s)
    r = resolution_s(window_s)  # 1 s
    _, write, read = write_read_scripts(client, op, window_s, late_ms)
    key = f"t:{{{uuid.uuid4().hex}}}"
    writes = []
    for i in range(3000):  # ten minutes, 5 writes a second
        t = T0 + 200 * i + 7
        write(keys=["", "", key], args=[t, "", ""])
        writes.append((t, ()))
    members = client.zrange(key + ":z", 0, -1, withscores=True)
    horizon = tile_index(t - late_ms, r) * r * 1000  # tiles ending at or before it hold one member each
    old = [int(score) // 1000 for _, score in members if score < horizon]
    assert old and len(old) == len(set(old))
    assert len(members) - len(old) == len([s for s, _ in writes if s >= horizon])
    assert [int(m) for m, _ in members] == sorted(int(m) for m, _ in members)  # running totals, by time
    # up to L late anywhere; beyond L (thinned tiles) after the last write of their tile, as a window edge is
    for back_ms in (0, 1, 199, 1_000, 30_001, late_ms - 1, late_ms + 5_000 - 7, 400_000 - 7):
        r_t = t - back_ms
        res = read(keys=["", "", key], args=[r_t, "", ""])
        assert res[0] & 2 == (2 if back_ms else 0)
        assert res[1] == len(counted(writes, r_t, window_s)), back_ms


@pytest.mark.parametrize("fn", [("Count", ()), ("Sum", ("int",)), ("Sum", ("float",)), ("Average", ("float",)),
                                ("First", ("string",)), ("Max", ("int",)), ("Min", ("float",))],
                         ids=lambda f: f[0] + "".join(f[1]))
def test_a_read_adds_the_ladders_tiles_to_the_online_running_totals(client, fn):
    """The tile ladder under a Count, Sum, Average, First, Min or Max state's key (what backfill and the
    stream write: a partial per tile of every level, compiler.algebra.windows.levels_s) and the online
    writes' running members in <key>:z are disjoint writes: a read counts both, and only the ladder's while
    no online write exists."""
    from compiler.algebra.windows import LEVEL_CODE, levels_s

    function, vtypes = fn
    window_s = 600
    op = make_op(function, vtypes, ("v",) if vtypes else (), window_s=window_s)
    w, rd = WriteSlot(op, window_s, 1), ReadSlot(op, window_s, 1)
    key = f"t:{{{uuid.uuid4().hex}}}"
    writes = []
    for i in range(400):  # the ladder's first (a backfill), then online writes
        t = T0 + 3_000 * i
        vals = () if not vtypes else (i % 7 - 2,) if vtypes == ("int",) else (i % 7 + 0.25,)
        if function == "First":
            vals = (f"v{i}",)
        if function in ("Min", "Max"):  # the window's extreme moves: falling and rising runs
            vals = ((i * 37) % 101 - 50,) if vtypes == ("int",) else ((i * 53) % 97 / 4,)
        if i < 250:
            for size in levels_s(window_s):
                f = f"{LEVEL_CODE[size]}{t // (size * 1000)}"
                if function == "First":  # each tile's earliest write (in time order: the first one set)
                    client.hsetnx(key, f, f"{t}\t{op.encode_values(vals)}")
                elif function in ("Min", "Max"):  # each tile's extreme
                    cur = client.hget(key, f)
                    better = min if function == "Min" else max
                    new = vals[0] if cur is None else better(vals[0], type(vals[0])(cur.decode()))
                    client.hset(key, f, repr(new) if isinstance(new, float) else str(new))
                elif function == "Average":
                    client.hincrbyfloat(key, f + ".s", vals[0])
                    client.hincrby(key, f + ".c", 1)
                elif vtypes == ("float",):
                    client.hincrbyfloat(key, f, vals[0])
                else:
                    client.hincrby(key, f, vals[0] if vals else 1)
        else:
            run_round(client, RoundSpec("c", writes=(w,)), ["", "", key], [t, "", "", *GEN.write_values(w, vals)])
        writes.append((t, vals))
        if i in (100, 249, 250, 300, 399):
            res = run_round(client, RoundSpec("r", reads_after=(rd,)), ["", "", key], [t, "", ""])
            want = fold(op, counted(writes, t, window_s))
            got = op.finalize(GEN.decode_read(rd, res[1]))
            assert got == (want if function in ("First", "Min", "Max") else pytest.approx(want, rel=1e-12)), i
    # the running members' key is the state key with keys.RUNNING_SUFFIX (scowl status and the demo's reset map it)
    assert client.type(key) == b"hash" and client.type(key + RUNNING_SUFFIX) == b"zset"


def test_a_rounds_reads_check_their_ladders_with_one_exists_and_each_still_adds_its_own(client):
    """A round's Count/Sum/Average/Min/Max/First/Decayed* reads ask for their ladder hashes with one
    EXISTS of all their keys (issue 10); while none exists that is the round's only EXISTS, and once one
    does (a backfill's tiles under one state), every read still adds exactly its own ladder."""
    window_s = 600
    cnt = make_op("Count", (), (), window_s=window_s)
    sm = make_op("Sum", ("int",), ("v",), window_s=window_s)
    dc = make_op("DecayedCount", (), (), window_s=window_s)
    slots = [(cnt, ()), (sm, (3,)), (dc, ())]
    writes = tuple(WriteSlot(op, window_s, 1) for op, _ in slots)
    reads = tuple(ReadSlot(op, window_s, 1) for op, _ in slots)
    spec = RoundSpec("g", writes=writes, reads_after=reads)
    tag = uuid.uuid4().hex
    keys = [f"t:{{{tag}}}:{j}" for j in range(len(slots))]

    def event(t):
        argv = [t, "", ""]
        for w, (_, vals) in zip(writes, slots):
            argv += GEN.write_values(w, vals)
        return run_round(client, spec, ["", "", *keys, *keys], argv)

    client.config_resetstat()
    for i in range(5):
        res = event(T0 + 1_000 * i)
    assert int(client.info("commandstats")["cmdstat_exists"]["calls"]) == 5
    assert GEN.decode_read(reads[0], res[1]) == 5 and GEN.decode_read(reads[1], res[2]) == 15
    # a backfill's tile under the Count state only: 7 more writes, in a tile the window counts
    client.hset(keys[0], f"s{(T0 + 5_000) // 1000}", 7)
    res = event(T0 + 6_000)
    assert GEN.decode_read(reads[0], res[1]) == 6 + 7
    assert GEN.decode_read(reads[1], res[2]) == 18
    ir = None
    for t in [T0 + 1_000 * i for i in range(5)] + [T0 + 6_000]:
        ir = dc.update(ir, (), t)
    assert GEN.finisher(ReadSlot(dc, window_s, 1))(res[3], T0 + 6_000, None) == pytest.approx(dc.value_at(ir, T0 + 6_000),
                                                                                     rel=1e-12)


def test_a_decayed_read_merges_the_ladders_sums_with_the_online_members(client):
    """A Decayed* state's hash (dt/dv/dw: what backfill and the stream write) and the online writes' members in
    <key>:z (lua.py dr_write) are disjoint writes: a read merges both partials, weighed at the read's time."""
    op = make_op("DecayedSum", ("float",), ("v",), 600)
    w, rd = WriteSlot(op, 600, 1), ReadSlot(op, 600, 1)
    key = f"t:{{{uuid.uuid4().hex}}}"
    ir = None
    for i in range(300):
        t, vals = T0 + 2_000 * i, (i % 5 + 0.5,)
        ir = op.update(ir, vals, t)
        if i < 150:  # the ladder's sums, as a backfill leaves them
            client.hset(key, mapping={"dt": ir[0], "dv": repr(ir[1]), "dw": repr(ir[2])})
        else:
            run_round(client, RoundSpec("w", writes=(w,)), ["", "", key], [t, "", "", *GEN.write_values(w, vals)])
        if i in (100, 150, 299):
            res = run_round(client, RoundSpec("r", reads_after=(rd,)), ["", "", key], [t, "", ""])
            assert GEN.finisher(rd)(res[1], t, None) == pytest.approx(op.value_at(ir, t), rel=1e-12), i


EXTREME_VALUES = {"int": st.integers(-3, 3), "string": st.sampled_from(["", "a", "ab", "b", "é"]),
                  "float": st.sampled_from([-1.5, 0.0, 0.25, 2.0, 1e300])}


def arrival_order(data, values, late_ms: int, span_s: int, most: int) -> list:
    """Writes ``(time ms, values())`` at whole seconds and at any ms of ``span_s`` seconds after ``T0``, ties
    included, in a drawn arrival order, less those more than ``late_ms`` before the newest that arrived
    earlier (beyond the allowed lateness: not exact by contract, SPEC §3.3)."""
    times = data.draw(st.lists(st.one_of(st.integers(0, span_s).map(lambda x: 1000 * x),
                                         st.integers(0, span_s * 1000)), min_size=1, max_size=most))
    writes = [(T0 + s, values()) for s in times]
    out, newest = [], None
    for i in data.draw(st.permutations(range(len(writes)))):
        t, vals = writes[i]
        if newest is None or t >= newest - late_ms:
            out.append((t, vals))
            newest = t if newest is None else max(newest, t)
    return out


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), function=st.sampled_from(["Min", "Max"]), vtype=st.sampled_from(sorted(EXTREME_VALUES)),
       window_s=st.sampled_from([5, 60]))
def test_min_max_running_deque_equals_the_oracle_in_any_arrival_order(client, data, function, vtype, window_s):
    """Min and Max written online (lua.py mx_write, mx_late, mx_read: a monotonic deque whose popped members
    are kept while a read up to L late can see them): writes in any arrival order, at most L late, with ties
    of time and of value, and reads after each write at times up to L before the newest write, equal SPEC
    §3.2's fold of the writes that arrived before the read (§3.3)."""
    late_ms = 20_000
    op = make_op(function, (vtype,), ("v",), window_s)
    r = resolution_s(window_s)
    w, write, read = write_read_scripts(client, op, window_s, late_ms)
    key = f"t:{{{uuid.uuid4().hex}}}"
    arrived, newest = [], None
    for s, vals in arrival_order(data, lambda: (data.draw(EXTREME_VALUES[vtype]),), late_ms, 40, 25):
        write(keys=["", "", key], args=[s, "", "", *GEN.write_values(w, vals)])
        arrived.append((s, vals))
        newest = s if newest is None else max(newest, s)
        for back in data.draw(st.lists(st.integers(0, late_ms), max_size=2)):
            r_t = newest - back
            res = read(keys=["", "", key], args=[r_t, "", ""])
            assert res[0] & 2 == (2 if r_t < newest else 0)
            got = op.finalize(GEN.decode_read(ReadSlot(op, window_s, r), res[1]))
            assert got == fold(op, counted(sorted(arrived, key=lambda a: a[0]), r_t, window_s)), (r_t, arrived)


SAME_CALL = [("Count", ()), ("Sum", ("int",)), ("Average", ("float",)), ("DecayedCount", ()), ("Min", ("int",)),
             ("Max", ("float",)), ("First", ("string",)), ("FirstTime", ())]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), fn=st.sampled_from(SAME_CALL), window_s=st.sampled_from([5, 60]))
def test_a_read_after_its_own_write_in_one_call_equals_the_oracle_in_any_arrival_order(client, data, fn, window_s):
    """An event that writes a state and reads it inclusively: the reads after the writes of one call take
    what the call's own write left newest without a lookup when that write was in time order (lua.py ``ZT``),
    and look it up when it was late. Writes in any arrival order up to L late, with ties of time and value,
    each read at its own write's time in the same call (a function library, ``FCALL``: its per-call state
    would carry over to the next call unless reset), equal SPEC §3.2's fold of the writes that arrived up to
    it (§3.3); its late flag says whether a later write arrived before."""
    from compiler.algebra.script import as_function

    late_ms = 20_000
    function, vtypes = fn
    op = make_op(function, vtypes, ("v",) if vtypes else (), window_s)
    r = resolution_s(window_s)
    w, rd = WriteSlot(op, window_s, r), ReadSlot(op, window_s, r)
    name, library = as_function(GEN.script(RoundSpec("wr", writes=(w,), reads_after=(rd,), lateness_ms=late_ms)))
    client.execute_command("FUNCTION", "LOAD", "REPLACE", library)
    small = {"int": st.integers(-3, 3), "float": st.sampled_from([-1.5, 0.0, 0.25, 2.0]),
             "string": st.sampled_from(["a", "b", ""])}
    key = f"t:{{{uuid.uuid4().hex}}}"
    arrived, newest = [], None
    for t, vals in arrival_order(data, lambda: tuple(data.draw(small[vt]) for vt in vtypes), late_ms, 30, 20):
        res = client.execute_command("FCALL", name, 4, "", "", key, key, t, "", "", *GEN.write_values(w, vals))
        assert res[0] & 2 == (2 if newest is not None and t < newest else 0), (t, newest)
        arrived.append((t, vals))
        newest = t if newest is None else max(newest, t)
        if function.startswith("Decayed"):  # every write up to t, no window
            ir = None
            for s, vals in sorted(arrived, key=lambda a: a[0]):
                ir = op.update(ir, vals, s) if s <= t else ir
            got = GEN.finisher(rd)(res[1], t, None)
            assert got == pytest.approx(op.value_at(ir, t), rel=1e-9), (t, arrived)
            continue
        got = op.finalize(GEN.decode_read(rd, res[1]))
        want = fold(op, counted(sorted(arrived, key=lambda a: a[0]), t, window_s))
        assert got == pytest.approx(want, rel=1e-12) if isinstance(want, float) else got == want, (t, arrived)


@pytest.mark.parametrize("function,values,want", [("Max", [5, 3], 5), ("Min", [9, 10], 9), ("Max", [2, -1, 2], 2)])
def test_min_max_keep_one_member_per_event_time(client, function, values, want):
    """Writes at one ms, the later ones no better, leave the deque one member for that ms (mx_write): members
    of one score sort by their text, so a second, worse one ('<ms>|10' before '<ms>|9') would be a read's
    first member."""
    op = make_op(function, ("int",), ("v",), 60)
    w, write, read = write_read_scripts(client, op, 60, 0)
    key = f"t:{{{uuid.uuid4().hex}}}"
    for v in values:
        write(keys=["", "", key], args=[T0, "", "", *GEN.write_values(w, [v])])
    assert client.zrangebyscore(key + ":z", "-inf", 2**49) == [f"{T0}|{want}".encode()]
    res = read(keys=["", "", key], args=[T0 + 1, "", ""])
    assert op.finalize(GEN.decode_read(ReadSlot(op, 60, 1), res[1])) == want


@pytest.mark.parametrize("fn", [("Count", ()), ("Sum", ("int",)), ("Sum", ("float",)), ("Average", ("float",)),
                                ("DecayedSum", ("float",)), ("Max", ("int",)), ("First", ("string",))],
                         ids=lambda f: f[0] + "".join(f[1]))
def test_writes_more_than_the_allowed_lateness_late_leave_the_running_members_alone(client, fn):
    """A write more than L late (SPEC §3.3) into a Count, Sum, Average or Decayed* state goes into the tile ladder
    of its state's hash (lua.py zr_write 'L', LuaGenerator._ladder_write; Decayed*: the hash's decayed sums),
    which reads add, instead of shifting every later running member: the members stay as they were, and
    reads in time order and up to L late (one in the late write's own resolution tile) count it. Min, Max and
    First take such writes in their own members at the cost of any late write."""
    function, vtypes = fn
    window_s, late_ms = 86400, 60_000
    op = make_op(function, vtypes, ("v",) if vtypes else (), window_s)
    r = resolution_s(window_s)
    w, write, read = write_read_scripts(client, op, window_s, late_ms)
    key = f"t:{{{uuid.uuid4().hex}}}"
    newest = (T0 // 60_000 + 20) * 60_000 + 30_000 + late_ms  # newest - L lies mid-minute

    def value(i):
        return () if not vtypes else (f"v{i}",) if vtypes == ("string",) else (i % 9 - 3,) if vtypes == ("int",) \
            else (i % 9 + 0.25,)

    writes = []
    for k in range(199, -1, -1):  # in time order, one write every 3 s up to newest
        writes.append((newest - 3_000 * k, value(k)))
        write(keys=["", "", key], args=[writes[-1][0], "", "", *GEN.write_values(w, writes[-1][1])])
    before = client.zrange(key + ":z", 0, -1, withscores=True)
    for j, back in enumerate((late_ms + 500, 2 * late_ms + 7, 400_000)):  # more than L late
        writes.append((newest - back, value(1000 + j)))
        res = write(keys=["", "", key], args=[writes[-1][0], "", "", *GEN.write_values(w, writes[-1][1])])
        assert res[0] & 6 == 6  # flagged more than L late
    running = function in ("Count", "Sum", "Average") or function.startswith("Decayed")
    if running:
        assert client.zrange(key + ":z", 0, -1, withscores=True) == before and client.exists(key)
    in_time_order = sorted(writes, key=lambda a: a[0])
    for r_t in (newest, newest - 1_000, newest - late_ms + 100):  # the last in the tile of the first late write
        res = read(keys=["", "", key], args=[r_t, "", ""])
        if function.startswith("Decayed"):
            ir = None
            for s_, vals in in_time_order:
                if s_ <= r_t:
                    ir = op.update(ir, vals, s_)
            assert GEN.finisher(ReadSlot(op, window_s, r))(res[1], r_t, None) == pytest.approx(op.value_at(ir, r_t), rel=1e-12), r_t
            continue
        got = op.finalize(GEN.decode_read(ReadSlot(op, window_s, r), res[1]))
        want = fold(op, counted(in_time_order, r_t, window_s))
        assert got == (pytest.approx(want, rel=1e-12) if vtypes == ("float",) else want), r_t


@pytest.mark.parametrize("function", ["Sum", "Average"])
def test_a_tiny_window_sum_after_a_large_total_keeps_its_digits(client, function):
    """A float window sum many orders below the running total before it (lua.py rs_add, _window_sum: the totals are
    exact expansions, not double-doubles, which read this window as 0.0; found by hypothesis in a fresh
    clone) is the window's sum (SPEC §3.3: within 1e-9 relative)."""
    op = make_op(function, ("float",), ("v",), 10)
    w, write, _ = write_read_scripts(client, op, 10, 0)
    rd = ReadSlot(op, 10, 1, has_after=True)
    key = f"t:{{{uuid.uuid4().hex}}}"
    writes = [(T0, 1.0), (T0, 15.6), (T0 + 1000, 4.6064371756155255e-203), (T0 + 2000, -3e-210)]
    for s_, v in writes:
        write(keys=["", "", key], args=[s_, "", "", *GEN.write_values(w, [v])])
    res = run_round(client, RoundSpec("r", reads_after=(rd,)), ["", "", key], [T0 + 2000, "", "", T0])
    got = op.finalize(GEN.decode_read(rd, res[1]))
    window = [4.6064371756155255e-203, -3e-210]  # after T0: T(s) > T(a)
    assert got == pytest.approx(sum(window) / (len(window) if function == "Average" else 1), rel=1e-12, abs=0)


def test_a_max_deque_is_thinned_to_each_old_tiles_best(client):
    """Falling values keep every write in a Max's deque (none pops another); past the allowed lateness its
    tiles are thinned to their first member (lua.py zr_thin with first: the tile's best), so memory stays one
    member a tile there and reads, which take old tiles whole, still see each tile's maximum."""
    window_s, late_ms = 3600, 10_000
    op = make_op("Max", ("int",), ("v",), window_s)
    w, write, read = write_read_scripts(client, op, window_s, late_ms)
    key = f"t:{{{uuid.uuid4().hex}}}"
    writes = [(T0 + 100 * i, (10_000 - i,)) for i in range(600)]  # one a 100 ms for a minute, falling
    for s_, vals in writes:
        write(keys=["", "", key], args=[s_, "", "", *GEN.write_values(w, vals)])
    newest = writes[-1][0]
    deque = [int(score) for _, score in client.zrangebyscore(key + ":z", "-inf", 2**49, withscores=True)]
    old = [s_ for s_ in deque if s_ // 1000 < (newest - late_ms) // 1000 - 1]
    assert old and len({s_ // 1000 for s_ in old}) == len(old)  # one member a thinned (1 s) tile
    assert len(deque) > late_ms // 100  # the last L: every write
    for back in (0, late_ms - 1):
        r_t = newest - back
        res = read(keys=["", "", key], args=[r_t, "", ""])
        assert op.finalize(GEN.decode_read(ReadSlot(op, window_s, 1), res[1])) == fold(op, counted(writes, r_t, window_s))
    # a 1-minute window's edge inside the thinned tiles: the first write of its first tile
    op60 = make_op("Max", ("int",), ("v",), 60)
    res = client.eval(GEN.script(RoundSpec("r", reads_after=(ReadSlot(op60, 60, 1),), lateness_ms=late_ms)), 3,
                      "", "", key, newest + 5_000, "", "")
    assert op60.finalize(GEN.decode_read(ReadSlot(op60, 60, 1), res[1])) == fold(op60, counted(writes, newest + 5_000, 60))


def test_the_prelude_state_a_call_changes_is_set_anew_by_each_call():
    """A Valkey function library runs the prelude once (``script.as_function``), so every top-level
    local that code inside a function assigns or fills must be one ``_PER_CALL_STATE`` resets, or one of
    the memos ``_CROSS_CALL_CACHES`` keeps on purpose (the covers by slot; the next test holds their
    answers to ``EVAL``'s call after call)."""
    import re

    from compiler.algebra import lua as lua_module
    from compiler.algebra.script import _chunks

    prelude = common_script() + lua_module._PRELUDE
    names = set().union(*(names for names, _ in _chunks(prelude)))
    # code inside functions: the indented lines, without comments
    inner = "\n".join(re.sub(r"--.*", "", line) for line in prelude.splitlines() if line[:1] in (" ", "\t"))
    changed = {n for n in names
               if re.search(rf"(?m)^(?!\s*local\b).*(?<![\w.]){n}\s*(\[[^\]]*\])?\s*(,\s*[\w\[\]]+\s*)*=(?!=)", inner)
               or re.search(rf"table\.insert\(\s*{n}\b", inner)}
    assert changed, "the scan finds nothing: it no longer reads the prelude"
    listed = {x for name, line in lua_module._PER_CALL_STATE for x in re.findall(r"\w+(?=\s*[,=])", line)}
    caches = set(lua_module._CROSS_CALL_CACHES)
    assert changed <= listed | caches, changed - listed
    # each kept memo is a prelude local that code inside functions uses (tiles hands it to slot_cover)
    assert caches <= names and all(re.search(rf"(?<![\w.]){n}\b", inner) for n in caches)
    assert not listed & caches


def test_a_generated_script_as_a_function_library_answers_as_the_script(redis_url):
    """``as_function`` of a round script, loaded with ``FUNCTION LOAD``: ``FCALL`` gives what ``EVAL`` gives,
    call after call (its per-call state reset: a late write's flag must not stick to the next call)."""
    from compiler.algebra.script import as_function

    gen = LuaGenerator()
    mx, count = make_op("Max", ("float",), window_s=3600), make_op("Count", (), window_s=3600)
    spec = RoundSpec(name="t", reads_before=(), lateness_ms=3_600_000,
                     writes=(WriteSlot(mx, 3600, 60), WriteSlot(count, 3600, 1)),
                     reads_after=(ReadSlot(mx, 3600, 60), ReadSlot(count, 3600, 1)))
    script = gen.script(spec)
    name, library = as_function(script)
    client = redis.Redis.from_url(redis_url)
    client.execute_command("FUNCTION", "LOAD", "REPLACE", library)
    t0 = 1_700_000_000_000
    calls = [(t0 + dt, v) for dt, v in [(0, "5"), (60_000, "3"), (30_000, "9"), (120_000, "1"), (90_000, "2")]]
    keys = ["", "", "sc:{a}:m", "sc:{a}:c", "sc:{a}:m", "sc:{a}:c"]
    replies = eval_and_fcall(client, script, name, [
        (keys, [str(t), "", "", *gen.write_values(spec.writes[0], (float(v),)), *gen.write_values(spec.writes[1], ())])
        for t, v in calls])
    assert replies["fcall"] == replies["eval"]
    flags = [r[0] for r in replies["fcall"]]
    assert flags[2] != 1 and flags[3] == 1  # the late call is flagged, the next in-order one is not
    client.close()


def test_covers_kept_from_call_to_call_answer_as_covers_computed_anew(redis_url):
    """The tile covers a function library keeps between calls (``_CROSS_CALL_CACHES``) give, call after call,
    what ``EVAL`` gives computing every cover anew: reads in one finest tile, in the next ones, back in an
    earlier one (late), with the ladder's short and exact covers (a late write makes reads take the exact one)."""
    import random

    from compiler.algebra.script import as_function

    gen = LuaGenerator()
    hll = make_op("HyperLogLog", ("string",), window_s=86400)
    spec = RoundSpec(name="t", lateness_ms=3_600_000, writes=(WriteSlot(hll, 86400, 60),),
                     reads_after=(ReadSlot(hll, 86400, 60), ReadSlot(hll, 86400, 60)))
    script = gen.script(spec)
    name, library = as_function(script)
    client = redis.Redis.from_url(redis_url)
    client.execute_command("FUNCTION", "LOAD", "REPLACE", library)
    rng = random.Random(7)
    t0 = 1_700_000_000_000
    times = sorted(t0 + rng.randint(0, 3 * 86_400_000) for _ in range(150))
    calls = []
    for i, t in enumerate(times):
        calls.append((t, f"u{rng.randint(0, 40)}"))
        if i % 10 == 9:  # now and then a late one, up to 50 minutes back
            calls.append((t - rng.randint(0, 3_000_000), f"u{rng.randint(0, 40)}"))
    keys = ["", "", "sc:{h}:x", "sc:{h}:x", "sc:{h}:x"]
    replies = eval_and_fcall(client, script, name,
                             [(keys, [str(t), "", "", *gen.write_values(spec.writes[0], (v,))]) for t, v in calls])
    assert replies["fcall"] == replies["eval"]
    assert sum(1 for r in replies["fcall"] if r[0] != 1) >= 10  # the late calls were flagged late
    assert all(r[1] == r[2] for r in replies["fcall"])  # the two reads of a call share one cover
    client.close()


@pytest.mark.parametrize("topology", ["examples/flights", "bench/topology_wide"])
def test_every_round_script_of_a_large_topology_loads_as_a_function_library(redis_url, topology):
    """Lua 5.1 gives a function 60 upvalues and a chunk 200 locals: the library form of every round
    script (``script.as_function``: prelude names, cached globals and hoisted constant tables become
    upvalues of its function) must load, for the 70-state wide topology too, dry runs included."""
    from pathlib import Path

    from compiler import compile_dir
    from compiler.algebra.script import as_function
    from serving.evaluate import Evaluator

    plan = compile_dir(Path(__file__).resolve().parents[2] / topology).plan
    client = redis.Redis.from_url(redis_url)
    scripts = Evaluator(plan, run=None).scripts()
    assert len(scripts) >= 2 * len(plan.events)  # rounds and dry rounds
    for script in scripts:
        name, library = as_function(script)
        assert client.execute_command("FUNCTION", "LOAD", "REPLACE", library) == name.encode()
    client.function_flush()
    client.close()


def test_a_round_with_every_level_list_stays_within_lua_s_upvalue_limit(redis_url):
    """Reads at every window size from 30 s to a year and three resolutions: every distinct constant
    table (tile sizes, level codes, components) there is. Its library's function keeps to
    ``MAX_HOISTED_UPVALUES`` upvalues (Lua allows 60), loads, and answers as the script."""
    from compiler.algebra.lua import MAX_HOISTED_UPVALUES
    from compiler.algebra.script import as_function, code_names, top_level_names

    reads = []
    for function, vtypes in [("Count", ()), ("Average", ("float",)), ("Min", ("float",)), ("First", ("string",))]:
        for window_s in (30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 14400, 28800, 86400, 172800, 604800,
                         1209600, 2592000, 7776000, 31536000):
            for res in (1, 60, 3600):
                if window_s > res:
                    reads.append(ReadSlot(make_op(function, vtypes, window_s=window_s), window_s, res))
    script = LuaGenerator().script(RoundSpec(name="t", reads_before=(), writes=(), reads_after=tuple(reads),
                                             lateness_ms=3_600_000))
    head, _, body = script.partition("\n-- once per call:\n")
    hoisted = [line for line in head.splitlines() if line.startswith("local c") and " = {" in line]
    assert len(hoisted) >= 15
    assert len(code_names(body) & top_level_names(head)) <= MAX_HOISTED_UPVALUES <= 60
    name, library = as_function(script)
    client = redis.Redis.from_url(redis_url)
    assert client.execute_command("FUNCTION", "LOAD", "REPLACE", library) == name.encode()
    keys = ["", ""] + [f"sc:{{k}}:{i}" for i in range(len(reads))]
    argv = ["1700000000000", "", ""]
    assert client.execute_command("FCALL", name, len(keys), *keys, *argv) == \
        client.eval(script, len(keys), *keys, *argv)
    client.function_flush()
    client.close()


@pytest.mark.parametrize("terms", [[1e16, 1.0, -1e16], [0.1] * 10, [1e300, 1e-300, -1e300], [2.0**-1074, 1.0, -1.0]])
def test_a_window_sum_of_running_totals_is_the_correctly_rounded_sum_of_its_writes(client, terms):
    """Written through the generated script after writes the window leaves out, a float Sum's window is the
    correctly rounded sum of its writes: the script returns the two running totals (exact partials, lua.py
    rs_add) and the worker subtracts them and rounds once (``_window_sum``: ``math.fsum``), then adds the
    ladder's partial."""
    from math import fsum

    from compiler.algebra.lua import _float_sum_read

    op = make_op("Sum", ("float",), ("v",), 10)
    w, write, _ = write_read_scripts(client, op, 10, 0)
    key = f"t:{{{uuid.uuid4().hex}}}"
    before = [(T0 + 1000 * i, v) for i, v in enumerate([3.5, -1e300, 1e300])]
    window = [(T0 + 20_000 + 1000 * i, v) for i, v in enumerate(terms)]
    for t, v in before + window:
        write(keys=["", "", key], args=[t, "", "", *GEN.write_values(w, [v])])
    rd = ReadSlot(op, 10, 1)
    res = run_round(client, RoundSpec("r", reads_after=(rd,)), ["", "", key], [window[-1][0], "", ""])[1]
    assert GEN.decode_read(rd, res) == fsum(terms)
    assert _float_sum_read([res[0], res[1], b"2.5"]) == fsum(terms) + 2.5


@pytest.mark.parametrize("a,b,want", [(b"inf", b"inf", "nan"), (b"1e308 1e308", None, "inf"), (b"nan", b"1", "nan"),
                                      (b"-inf 5", b"-inf", "nan"), (b"2 1e308 1e308", b"1e308", "1e308")])
def test_a_window_sum_of_non_finite_totals_reads_as_the_expansion_arithmetic_gives_it(a, b, want):
    """Where ``fsum`` refuses (``inf - inf``, an overflowing partial), the worker subtracts the totals'
    partials as the script's ``ex_diff`` did (``ex_add`` steps, then from the largest): a NaN, an infinity
    or the value that arithmetic reaches, not an error."""
    import math

    from compiler.algebra.lua import _float_sum_read

    got = _float_sum_read([_member(a), _member(b), None])
    assert math.isnan(got) if want == "nan" else got == float(want)


def _member(payload: bytes | None) -> bytes | None:
    """A running-totals member ``<ms>|<payload>`` as ``rs_range`` returns it (``None`` stays ``None``)."""
    return None if payload is None else b"1700000000000|" + payload


@pytest.mark.parametrize("res, want", [
    ([b"10", b"3", b"5.0", b"2"], 14),  # a ladder tile written as "5.0" reads 5, as a Count's does
    ([b"10", None], 10),  # no running total before the window
    ([None, None, b"7"], 7),  # only the ladder (backfill)
    ([b"9223372036854775807", b"-9223372036854775808"], 2 ** 64 - 1),  # exact past int64: the finisher nulls it
])
def test_an_int_sums_read_is_finished_exactly_in_the_worker(res, want):
    """An int ``Sum`` read returns its two running totals' members as stored and the ladder's tiles (``rs_isum``);
    the worker's decoder takes their payloads and subtracts and adds them exactly, reading texts as a ``Count``'s
    tiles are read."""
    op = make_op("Sum", ("int",), ("v",), 3600)
    rd = ReadSlot(op, 3600, 1)
    res = [_member(res[0]), _member(res[1]), *res[2:]]
    assert GEN.decode_read(rd, res) == want
    if want >= 2 ** 63:
        with pytest.raises(EvalError):
            GEN.finisher(rd)(res, 0, None)
    else:
        assert GEN.finisher(rd)(res, 0, None) == want


def test_hll_read_estimate_without_numpys_text_reader(monkeypatch):
    """``_hll_arrays`` parses with ``int`` where a NumPy has no ``np.fromstring`` text mode: the same estimate."""
    import compiler.algebra.lua as lua

    regs = {(j * 37) % HLL_M: j % 11 + 1 for j in range(200)}
    text = "".join(f";{s}:{r}" for s, r in regs.items()).encode()

    def gone(*args, **kwargs):
        raise AttributeError("np.fromstring")

    monkeypatch.setattr(lua, "_HLL_ARRAYS", {})
    monkeypatch.setattr(lua.np, "fromstring", gone)
    assert hll_read_estimate([text, b";1:3"]) == hll_estimate(hll_merge([text, b";1:3"]))


_LOG_VALUES = {"int": st.integers(-2**63, 2**63 - 1), "float": st.floats(allow_nan=False),
               "str": st.text(max_size=12), "bool": st.booleans()}


@settings(max_examples=60, deadline=None)
@given(st.sampled_from(sorted(_LOG_VALUES)).flatmap(
    lambda vtype: st.tuples(st.just(vtype), st.lists(st.tuples(st.integers(0, 3), st.integers(0, 2**41),
                                                                 st.one_of(st.none(), _LOG_VALUES[vtype])),
                                                       max_size=30))))
def test_log_member_values_keep_what_the_parser_gives(case):
    """A read slot's kept write-log members (``log_member_values``) give the values ``log_member_parser`` gives,
    member after member, from bytes and from str, the second time from the cache."""
    from compiler.algebra.lua import log_member_values
    from compiler.algebra.ops import log_member, log_member_parser

    vtype, writes = case
    cached, plain = log_member_values([vtype, "str"]), log_member_parser([vtype, "str"])
    for rank, ms, v in writes:
        member = log_member(rank, ms, [v, "x"])
        for m in (member, member.encode(), member.encode()):
            assert cached(m) == plain(m)


def test_log_member_values_stay_bounded_and_keep_only_immutable_values(monkeypatch):
    """At most ``_LOG_MEMBERS_KEPT`` members per slot are kept (then the cache starts over, answers unchanged);
    a member whose values hold a list or dict is parsed at each read, so no read shares a mutable value."""
    import compiler.algebra.lua as lua
    from compiler.algebra.ops import log_member

    monkeypatch.setattr(lua, "_LOG_MEMBERS_KEPT", 5)
    values = lua.log_member_values(["int"])
    kept = next(c.cell_contents for c in values.__closure__ if isinstance(c.cell_contents, dict))
    for i in range(23):
        m = log_member(0, 1000 + i, [i]).encode()
        assert values(m) == (i,) and values(m) is values(m)
        assert m in kept and len(kept) <= 5
    nested = lua.log_member_values(["str"])
    m = b'00000000' + b'1000:{"v0":[1,2]}'
    first = nested(m)
    assert first == ([1, 2],) and nested(m) is not first


_FRESH_SLOTS = [("Count", (), None), ("Sum", ("float",), None), ("Sum", ("int",), None), ("Average", ("float",), None),
                ("Min", ("float",), None), ("Max", ("int",), None), ("First", ("string",), None),
                ("DecayedSum", ("float",), None), ("Sequence", ("string",), 3), ("Latest", ("string",), 2)]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(window_s=st.sampled_from([60, 3600, 86400]), dt=st.integers(0, 90_000), x=st.integers(-50, 50),
       earlier=st.booleans())
def test_a_read_of_a_state_its_own_call_created_answers_as_a_lookup_does(client, window_s, dt, x, earlier):
    """A read after a write in the same call, of a key that write created (its first write), is answered from
    what the write did, without a lookup (``zr_before``'s ``ZF``, ``mx_read``'s ``MF``, ``log_read``'s ``LF``):
    it equals what a read-only call at the same time then finds in the store, for every kind of state, and a
    key written before (``earlier``) takes the lookups as ever."""
    key_slots = [(make_op(f, vt, ("v",) if limit else (), window_s), limit) for f, vt, limit in _FRESH_SLOTS]
    r = resolution_s(window_s)
    writes = tuple(WriteSlot(op, window_s, r, limit=limit) for op, limit in key_slots)
    reads = tuple(ReadSlot(op, window_s, r, limit=limit) for op, limit in key_slots)
    both = RoundSpec("wr", writes=writes, reads_after=reads)
    read_only = RoundSpec("r", reads_after=reads)
    keys = [f"t:{{{uuid.uuid4().hex}}}:{i}" for i in range(len(key_slots))]

    def argv(t, x):
        values = {"string": f"v{x % 3}", "float": x / 4, "int": x}
        return [t, "", ""] + [v for w, (f, vt, _) in zip(writes, _FRESH_SLOTS)
                              for v in GEN.write_values(w, [values[k] for k in vt])]

    t = T0 + dt
    if earlier:  # one write before the window, one in it, with other values
        for at, y in ((t - 1000 * (window_s + 2 * r), x - 5), (t - 1000 * r - 7, x + 9)):
            run_round(client, RoundSpec("w", writes=writes), ["", "", *keys], argv(at, y))
    got = run_round(client, both, ["", "", *keys, *keys], argv(t, x))
    again = run_round(client, read_only, ["", "", *keys], [t, "", ""])
    assert got[1:] == again[1:]
    for (f, _, _), rd, a in zip(_FRESH_SLOTS, reads, got[1:]):  # every read counts the call's write (SPEC §3.2)
        if f.startswith("Decayed") or rd.limit:  # (finished by the worker: serving.evaluate)
            assert a and (not isinstance(a, list) or any(a)), (f, a)
        else:
            assert rd.op.finalize(GEN.decode_read(rd, a)) is not None, f


_FOLD_VALUES = {"int": st.integers(-2**63, 2**63 - 1), "float": st.floats(allow_nan=False, width=64),
               "string": st.text(max_size=8), "bool": st.booleans()}


@settings(max_examples=300, deadline=None)
@given(function=st.sampled_from(["Sequence", "Set", "Latest", "First", "LatestTime", "FirstTime", "CountUnique"]),
       vtypes=st.lists(st.sampled_from(sorted(_FOLD_VALUES)), min_size=1, max_size=2).map(tuple),
       times=st.sampled_from([(0, 10**12), (5, 7)]),
       data=st.data())
def test_a_log_read_equals_the_fold_of_its_members(function, vtypes, times, data):
    """``LuaGenerator.finisher``'s forms for write logs -- the bulk one of ``Sequence`` and ``Set`` (no score
    parsed), the one member of ``Latest*``/``First*`` (the newest, the oldest), the distinct encodings of
    ``CountUnique`` -- give what ``ops.fold`` gives over the members with their times, for every value type,
    repeats and same-millisecond ties (``times`` (5, 7): ties in arrival order)."""
    from compiler.algebra.ops import log_member, parse_log_member

    if function.endswith("Time"):
        vtypes = ()
    op = make_op(function, vtypes, tuple(f"v{i}" for i in range(len(vtypes))), 600)
    writes = data.draw(st.lists(st.tuples(st.integers(*times), st.tuples(*[_FOLD_VALUES[t] for t in vtypes])),
                                max_size=12))
    writes.sort(key=lambda w: w[0])
    members = [log_member(i, t, list(v)) for i, (t, v) in enumerate(writes)]
    res = []  # as the script returns them: newest first, each member then its score
    for m, (t, _) in zip(reversed(members), reversed(writes)):
        res += [m.encode(), str(t).encode()]
    finish = GEN.finisher(ReadSlot(op, 600, 1, 20))
    want = fold(op, [(t, parse_log_member(m, vtypes)) for m, (t, _) in zip(members, writes)])
    assert finish(res, 10**12, None) == want
    assert finish(res, 10**12, None) == want  # again, from the parsed members the slot kept


def test_a_count_unique_log_read_counts_values_as_their_keys_do():
    """``CountUnique``'s log form counts distinct encodings, as ``ops.fold`` does: ``0.0`` and ``-0.0`` (two
    member texts) are one value (SPEC §3.5), two strings that differ only in case are two."""
    from compiler.algebra.ops import log_member

    op = make_op("CountUnique", ("float",), ("v0",), 600)
    res = [log_member(1, 20, [-0.0]).encode(), b"20", log_member(0, 10, [0.0]).encode(), b"10"]
    assert GEN.finisher(ReadSlot(op, 600, 1, 20))(res, 30, None) == 1
    op = make_op("CountUnique", ("string",), ("v0",), 600)
    res = [log_member(0, 20, ["A"]).encode(), b"20", log_member(0, 10, ["a"]).encode(), b"10"]
    assert GEN.finisher(ReadSlot(op, 600, 1, 20))(res, 30, None) == 2
