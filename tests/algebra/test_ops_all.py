"""Algebra of the tile-store functions First, Latest, HyperLogLog, Decayed*, Sequence, Set.

SPEC §1 ("the merge algebra (init / update / merge / finalize per aggregate)
is defined once and used by writer and serving alike"), §2.4 (the functions),
§5.2 (each (aggregate, key) update is atomic: ``event.lua`` applies it). Checked
here, with hypothesis, on ``compiler.algebra.ops.make_op``:

* merge laws: associativity, commutativity and identity (``init()``) for the
  mergeable tile ops (First, HyperLogLog, Decayed* -- the latter up to float
  rounding), and that merging the partials of two consecutive runs of writes
  equals updating with all of them (what tiles rely on);
* storage round trips ``decode(encode(ir)) == ir`` (and write-log members);
* that the Lua ops ``FI``, ``LA``, ``HM``, ``DE``, ``ZW``/``ZR`` of
  ``event.lua``, run in a real Redis, store exactly ``encode`` of the Python
  ``update`` fold (DE: dv/dw within 1e-12 relative; HM: same registers);
* ``hll_estimate`` accuracy against the exact count and Apache DataSketches.
"""

from __future__ import annotations

import math
import random
import uuid

import pytest
import redis
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from compiler.algebra.ops import (
    HLL_M,
    hll_coupon,
    hll_estimate,
    log_member,
    make_op,
    parse_log_member,
    values_json,
)
from compiler.algebra.script import event_script
from compiler.algebra.windows import ALLOWED_LATENESS_S

# ----------------------------------------------------------------- strategies

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
SCALARS = {
    "int": INT64,
    "float": st.floats(allow_nan=False, allow_infinity=False, width=64),
    "string": st.text(max_size=6),
    "bool": st.booleans(),
    "time": st.integers(min_value=-(10**13), max_value=10**13),
}
VALUE_TYPES = [("int",), ("float",), ("string",), ("bool",), ("time",), ("string", "int"), ("time", "float", "bool")]
#: write times: many ties, negatives, large
TIMES = st.one_of(st.integers(min_value=0, max_value=5).map(lambda k: 1_700_000_000_000 + 1000 * k),
                  st.integers(min_value=-(10**12), max_value=10**13))


@st.composite
def writes(draw, value_types, max_size=8):
    """A list of ``(time_ms, values)`` writes (values non-null, SPEC §2.4)."""
    n = draw(st.integers(min_value=0, max_value=max_size))
    return [(draw(TIMES), tuple(draw(SCALARS[t]) for t in value_types)) for _ in range(n)]


def fold_ir(op, ws):
    """The partial aggregate of writes ``ws`` in order (``update`` from ``init``)."""
    ir = op.init()
    for t, v in ws:
        ir = op.update(ir, v, t)
    return ir


def rel_close(a, b, tol=1e-12):
    """Floats within ``tol`` relative (and tiny absolute for values near 0)."""
    return math.isclose(a, b, rel_tol=tol, abs_tol=1e-300)


def dec_close(a, b, tol=1e-12):
    """Two Decayed IRs ``(ref, sum_v, sum_w)`` (or ``None``) agree up to rounding."""
    if a is None or b is None:
        return a is b
    return a[0] == b[0] and rel_close(a[1], b[1], tol) and rel_close(a[2], b[2], tol)


# ----------------------------------------------------------------- merge laws

@settings(max_examples=150, deadline=None)
@given(data=st.data(), vt=st.sampled_from(VALUE_TYPES), fn=st.sampled_from(["First", "FirstTime", "Latest"]))
def test_pick_merge_laws(data, vt, fn):
    """SPEC §2.4 First/Latest: merge is associative with identity ``init()``;
    commutative when the partials' times differ (tiles are disjoint in time);
    ``merge(fold(xs), fold(ys)) == fold(xs + ys)`` when every write of ``xs``
    is older than every write of ``ys`` (consecutive tiles); First keeps the
    earliest write (ties: the earlier arrival), Latest the latest (ties: the
    later arrival)."""
    op = make_op(fn, () if fn.endswith("Time") else vt, ("a", "b", "c")[: len(vt)])
    a, b, c = (fold_ir(op, data.draw(writes(vt))) for _ in range(3))
    assert op.merge(op.merge(a, b), c) == op.merge(a, op.merge(b, c))
    assert op.merge(op.init(), a) == a == op.merge(a, op.init())
    if a is not None and b is not None and a[0] != b[0]:
        assert op.merge(a, b) == op.merge(b, a)
    ws = sorted(data.draw(writes(vt, max_size=10)), key=lambda w: w[0])
    k = data.draw(st.integers(min_value=0, max_value=len(ws)))
    assume(k in (0, len(ws)) or ws[k - 1][0] < ws[k][0])
    assert op.merge(fold_ir(op, ws[:k]), fold_ir(op, ws[k:])) == fold_ir(op, ws)
    ir = fold_ir(op, ws)
    if ws:
        if fn.startswith("First"):
            t = min(w[0] for w in ws)
            expect = next(w for w in ws if w[0] == t)
        else:
            t = max(w[0] for w in ws)
            expect = [w for w in ws if w[0] == t][-1]
        assert ir[0] == t
        if not fn.endswith("Time"):
            assert ir[1] == expect[1]


@settings(max_examples=100, deadline=None)
@given(data=st.data(), vt=st.sampled_from(VALUE_TYPES))
def test_hyperloglog_merge_laws(data, vt):
    """SPEC §2.4 HyperLogLog: register-wise max is associative, commutative,
    idempotent with identity ``init()``; merging the tiles of any split of the
    writes equals updating with all of them (order free)."""
    op = make_op("HyperLogLog", vt)
    a, b, c = (fold_ir(op, data.draw(writes(vt))) for _ in range(3))
    assert op.merge(op.merge(a, b), c) == op.merge(a, op.merge(b, c))
    assert op.merge(a, b) == op.merge(b, a)
    assert op.merge(op.init(), a) == a and op.merge(a, a) == a
    ws = data.draw(writes(vt, max_size=12))
    k = data.draw(st.integers(min_value=0, max_value=len(ws)))
    assert op.merge(fold_ir(op, ws[:k]), fold_ir(op, ws[k:])) == fold_ir(op, ws)
    assert op.finalize(fold_ir(op, ws)) == hll_estimate(fold_ir(op, ws))


DECAYED = st.sampled_from(["DecayedCount", "DecayedSum", "DecayedAverage"])
WINDOWS_S = st.sampled_from([1, 10, 600, 86_400, 30 * 86_400])
DEC_VALUES = st.floats(min_value=0, max_value=1e6, allow_nan=False)


@st.composite
def decayed_writes(draw, max_size=8):
    """Writes for Decayed*: non-negative values (no cancellation), times within a day."""
    n = draw(st.integers(min_value=0, max_value=max_size))
    base = 1_700_000_000_000
    return [(base + draw(st.integers(min_value=0, max_value=86_400_000)), (draw(DEC_VALUES),)) for _ in range(n)]


@settings(max_examples=150, deadline=None)
@given(data=st.data(), fn=DECAYED, w=WINDOWS_S)
def test_decayed_merge_laws(data, fn, w):
    """SPEC §2.4 Decayed*: merge is associative and commutative up to float
    rounding (1e-12 relative) with identity ``init()``; any split of the writes
    merges to the fold of all of them; ``value_at`` equals the definition
    ``sum(v * exp(-(t - s) / W))`` (count: v = 1; average: the ratio)."""
    op = make_op(fn, () if fn == "DecayedCount" else ("float",), window_s=w)
    a, b, c = (fold_ir(op, data.draw(decayed_writes())) for _ in range(3))
    assert dec_close(op.merge(op.merge(a, b), c), op.merge(a, op.merge(b, c)), 1e-12)
    assert dec_close(op.merge(a, b), op.merge(b, a), 1e-12)
    assert op.merge(op.init(), a) == a == op.merge(a, op.init())
    ws = data.draw(decayed_writes(max_size=10))
    k = data.draw(st.integers(min_value=0, max_value=len(ws)))
    assert dec_close(op.merge(fold_ir(op, ws[:k]), fold_ir(op, ws[k:])), fold_ir(op, ws), 1e-12)
    if not ws:
        assert op.value_at(fold_ir(op, ws), 0) == (None if fn == "DecayedAverage" else 0.0)
        return
    t = max(s for s, _ in ws) + data.draw(st.integers(min_value=0, max_value=10 * w * 1000))
    wt = [math.exp(-(t - s) / (w * 1000)) for s, _ in ws]
    got = op.value_at(fold_ir(op, ws), t)
    if fn == "DecayedCount":
        want = math.fsum(wt)
    elif fn == "DecayedSum":
        want = math.fsum(v[0] * x for (_, v), x in zip(ws, wt))
    else:
        ref = max(s for s, _ in ws)
        wr = [math.exp(-(ref - s) / (w * 1000)) for s, _ in ws]
        want = math.fsum(v[0] * x for (_, v), x in zip(ws, wr)) / math.fsum(wr)
    assert math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-300), (got, want)


@settings(max_examples=100, deadline=None)
@given(data=st.data(), vt=st.sampled_from(VALUE_TYPES))
def test_sequence_set_laws(data, vt):
    """SPEC §2.4 Sequence (values oldest first; structs for several values) and
    Set (distinct values ascending; tuples as lists): Set's merge is a
    commutative, associative union with identity; Sequence's is associative
    concatenation with identity; both finalize as the SPEC table says."""
    names = ("a", "b", "c")[: len(vt)]
    seq, sset = make_op("Sequence", vt, names), make_op("Set", vt, names)
    a, b, c = (data.draw(writes(vt)) for _ in range(3))
    fa, fb, fc = (fold_ir(sset, x) for x in (a, b, c))
    assert sset.merge(sset.merge(fa, fb), fc) == sset.merge(fa, sset.merge(fb, fc))
    assert sset.merge(fa, fb) == sset.merge(fb, fa) and sset.merge(sset.init(), fa) == fa
    qa, qb, qc = (fold_ir(seq, x) for x in (a, b, c))
    assert seq.merge(seq.merge(qa, qb), qc) == seq.merge(qa, seq.merge(qb, qc))
    assert seq.merge(seq.init(), qa) == qa == seq.merge(qa, seq.init())
    assert seq.merge(qa, qb) == fold_ir(seq, a + b)
    one = len(vt) == 1
    assert seq.finalize(fold_ir(seq, a)) == [v[0] if one else dict(zip(names, v)) for _, v in a]
    assert sset.finalize(fold_ir(sset, a)) == [v[0] if one else list(v) for v in sorted({v for _, v in a})]


# ----------------------------------------------------------------- round trips

@settings(max_examples=150, deadline=None)
@given(data=st.data(), vt=st.sampled_from(VALUE_TYPES),
       fn=st.sampled_from(["First", "FirstTime", "Latest", "LatestTime", "HyperLogLog"]))
def test_encode_decode_round_trip(data, vt, fn):
    """SPEC §1 (one tile layout for writer and serving): ``decode(encode(ir)) == ir``
    for every non-empty partial of First/Latest (and *Time) and HyperLogLog."""
    types = () if fn.endswith("Time") else vt
    op = make_op(fn, types, ("a", "b", "c")[: len(types)])
    ws = data.draw(writes(vt))
    assume(ws)
    ws = [(t, v if types else ()) for t, v in ws]
    ir = fold_ir(op, ws)
    raw = op.encode(ir)
    assert op.decode(raw) == ir
    assert op.decode([x.encode("utf-8") for x in raw]) == ir  # as redis-py returns them


@settings(max_examples=100, deadline=None)
@given(data=st.data(), fn=DECAYED, w=WINDOWS_S)
def test_decayed_round_trip(data, fn, w):
    """SPEC §2.4 Decayed*: the stored ``dt``/``dv``/``dw`` text (``%.17g``) decodes to the same IR."""
    op = make_op(fn, () if fn == "DecayedCount" else ("float",), window_s=w)
    ws = data.draw(decayed_writes())
    assume(ws)
    ir = fold_ir(op, ws)
    assert op.decode(op.encode(ir)) == ir
    assert op.decode([x.encode() for x in op.encode(ir)]) == ir


@settings(max_examples=150, deadline=None)
@given(data=st.data(), vt=st.sampled_from(VALUE_TYPES), rank=st.integers(min_value=0, max_value=10**8 - 1))
def test_log_member_round_trip(data, vt, rank):
    """SPEC §2.4 Sequence/Set/limit write logs: a member keeps the write's values
    exactly, and members of one millisecond order by arrival rank."""
    (t, values), = data.draw(writes(vt, max_size=1).filter(len))
    m = log_member(rank, t, values)
    assert parse_log_member(m, vt) == values
    assert parse_log_member(m.encode("utf-8"), vt) == values
    if rank + 1 < 10**8:
        assert log_member(rank, t, values) < log_member(rank + 1, t, values)


# ----------------------------------------------------------------- Lua == Python

@pytest.fixture()
def lua(redis_url):
    """``(client, script)``: ``event.lua`` registered with redis-py on the test server."""
    client = redis.Redis.from_url(redis_url)
    yield client, client.register_script(event_script())
    client.close()


def _key() -> str:
    """A fresh Redis key per hypothesis example (the fixture flushes only per test)."""
    return "sc:{test:" + uuid.uuid4().hex + "}:0000000000000000"


LUA_SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


@LUA_SETTINGS
@given(data=st.data(), vt=st.sampled_from(VALUE_TYPES), fn=st.sampled_from(["First", "FirstTime"]))
def test_lua_first_tile(lua, data, vt, fn):
    """SPEC §5.2 / ops.FirstOp: the ``FI`` op keeps in a tile field exactly
    ``encode`` of the Python fold (earliest write; ties: the earlier arrival)."""
    client, script = lua
    types = () if fn.endswith("Time") else vt
    op = make_op(fn, types)
    ws = data.draw(writes(vt))
    assume(ws)
    key, field = _key(), "m123"
    for t, v in ws:
        script(keys=[key], args=op.write_args(1, [field], v if types else (), t))
    ir = fold_ir(op, [(t, v if types else ()) for t, v in ws])
    assert client.hget(key, field).decode("utf-8") == op.encode(ir)[0]


@LUA_SETTINGS
@given(data=st.data(), vt=st.sampled_from(VALUE_TYPES), fn=st.sampled_from(["Latest", "LatestTime"]))
def test_lua_latest(lua, data, vt, fn):
    """SPEC §5.2 / ops.LatestOp: the ``LA`` op keeps ``lt``/``lv`` equal to
    ``encode`` of the Python fold (latest write; ties: the later arrival)."""
    client, script = lua
    types = () if fn.endswith("Time") else vt
    op = make_op(fn, types)
    ws = data.draw(writes(vt))
    assume(ws)
    key = _key()
    for t, v in ws:
        script(keys=[key], args=op.write_args(1, [], v if types else (), t))
    ir = fold_ir(op, [(t, v if types else ()) for t, v in ws])
    lt, lv = client.hmget(key, "lt", "lv")
    assert [lt.decode(), lv.decode("utf-8")] == op.encode(ir)


@LUA_SETTINGS
@given(data=st.data(), vt=st.sampled_from(VALUE_TYPES))
def test_lua_hyperloglog_tile(lua, data, vt):
    """SPEC §5.2 / ops.HyperLogLogOp: the ``HM`` op leaves a tile whose registers
    (``decode``) equal the Python fold's, whatever the order of slots in the text."""
    client, script = lua
    op = make_op("HyperLogLog", vt)
    ws = data.draw(writes(vt, max_size=30))
    assume(ws)
    key, field = _key(), "h9"
    for t, v in ws:
        script(keys=[key], args=op.write_args(1, [field], v, t))
    assert op.decode([client.hget(key, field)]) == fold_ir(op, ws)


@LUA_SETTINGS
@given(vals=st.lists(st.tuples(st.integers(min_value=0, max_value=HLL_M - 1), st.integers(min_value=1, max_value=53)),
                     min_size=1, max_size=40))
def test_lua_hyperloglog_registers(lua, vals):
    """SPEC §5.2: ``HM`` register updates with slots whose decimal texts contain
    each other (1, 11, 111, 21 ...) and multi-digit rho keep each register's max."""
    client, script = lua
    key, field = _key(), "h1"
    want: dict[int, int] = {}
    for slot, rho in vals:
        script(keys=[key], args=["HM", 1, field, slot, rho])
        want[slot] = max(want.get(slot, 0), rho)
    assert make_op("HyperLogLog", ("int",)).decode([client.hget(key, field)]) == want


@LUA_SETTINGS
@given(data=st.data(), fn=DECAYED, w=WINDOWS_S)
def test_lua_decayed(lua, data, fn, w):
    """SPEC §2.4, §5.2 / ops.DecayedOp: the ``DE`` op (writes in any time order)
    stores ``dt`` equal and ``dv``/``dw`` within 1e-12 relative of the Python fold."""
    client, script = lua
    op = make_op(fn, () if fn == "DecayedCount" else ("float",), window_s=w)
    ws = data.draw(decayed_writes(max_size=12))
    assume(ws)
    key = _key()
    for t, v in ws:
        script(keys=[key], args=op.write_args(1, [], v if fn != "DecayedCount" else (), t))
    ir = fold_ir(op, [(t, v if fn != "DecayedCount" else ()) for t, v in ws])
    got = op.decode(client.hmget(key, "dt", "dv", "dw"))
    assert dec_close(got, ir, 1e-12), (got, ir)


#: what ``event.lua``'s write logs keep of every write (the serving default, SPEC §3.3)
LATE_MS = ALLOWED_LATENESS_S * 1000


@LUA_SETTINGS
@given(data=st.data(), vt=st.sampled_from(VALUE_TYPES), n=st.integers(min_value=1, max_value=5),
       keep_ms=st.one_of(st.integers(min_value=1, max_value=20_000), st.integers(min_value=1, max_value=3 * LATE_MS)))
def test_lua_write_log(lua, data, vt, n, keep_ms):
    """SPEC §2.4 ``limit`` / Sequence / Set write logs: ``ZW`` keeps exactly the
    members ``log_member(rank, t, values)`` not older than each write's cutoff
    of the writes of the allowed lateness before it and the ``n`` latest (by
    time, then arrival) before those (SPEC §3.3), and ``ZR`` returns the
    ``n`` latest members in a time range, newest first."""
    client, script = lua
    base = 1_700_000_000_000
    span = data.draw(st.sampled_from([30_000, 3 * LATE_MS]))  # within the allowed lateness, or beyond it
    times = sorted(base + data.draw(st.integers(min_value=0, max_value=span)) for _ in range(data.draw(st.integers(0, 15))))
    assume(times)
    key = _key()
    kept: list[tuple[int, int, str]] = []  # (time, rank, member)
    rank_at: dict[int, int] = {}
    for t in times:
        (_, values), = data.draw(writes(vt, max_size=1).filter(len))
        script(keys=[key], args=["ZW", 1, t, values_json(values), n, t - keep_ms, 600_000])
        # the Python model of the log: ranks per millisecond, cutoff, keep the n highest
        top = max((r for tt, r, _ in kept if tt == t), default=None)
        r = 0 if top is None else top + 1
        rank_at[t] = r
        kept.append((t, r, log_member(r, t, values)))
        # ... every member of the allowed lateness before t, and the n latest before those (SPEC §3.3)
        kept = sorted(x for x in kept if x[0] >= t - keep_ms)
        below = [x for x in kept if x[0] < t - LATE_MS]
        kept = below[max(0, len(below) - n):] + [x for x in kept if x[0] >= t - LATE_MS]
    got = [m.decode("utf-8") for m in client.zrange(key, 0, -1)]
    assert got == [m for _, _, m in kept]
    lo = data.draw(st.integers(min_value=times[0] - 1, max_value=times[-1]))
    hi = data.draw(st.integers(min_value=lo, max_value=times[-1] + 1))
    lim = data.draw(st.integers(min_value=1, max_value=6))
    res = script(keys=[key], args=["ZR", 1, lo, hi, lim])[0]
    members = [res[j].decode("utf-8") for j in range(0, len(res), 2)]
    scores = [int(float(res[j + 1])) for j in range(0, len(res), 2)]
    want = [x for x in reversed(kept) if lo <= x[0] <= hi][:lim]
    assert members == [m for _, _, m in want]
    assert scores == [t for t, _, _ in want]


# ----------------------------------------------------------------- HLL accuracy

RSE = 1.04 / math.sqrt(HLL_M)


def _ours(items) -> int:
    """Our estimate of the distinct count of ``items`` (registers as ``HyperLogLogOp`` keeps them)."""
    regs: dict[int, int] = {}
    for it in items:
        slot, rho = hll_coupon(it)
        if regs.get(slot, 0) < rho:
            regs[slot] = rho
    return hll_estimate(regs)


def test_hll_estimate_accuracy(record_property):
    """SPEC §2.4: HyperLogLog standard error <= 2%. Over seeded random sets of
    0..200000 distinct items, each estimate is within 3 standard errors
    (3 x 1.04/sqrt(4096)) of the exact count (plus 1 for rounding a small
    estimate), the root-mean-square relative error per size is <= 2%, and
    Apache DataSketches' ``hll_sketch(12)`` on the same items is reported
    beside it (printed with ``-s``; recorded as a property)."""
    import datasketches as ds  # a test dependency (pyproject [test])
    rng = random.Random(20240501)
    plan = [(0, 1), (1, 5), (10, 20), (100, 20), (1_000, 20), (4_096, 8), (10_000, 6), (50_000, 3), (200_000, 2)]
    rows = []
    for n, reps in plan:
        se_ours = se_ds = 0.0
        worst = 0.0
        for rep in range(reps):
            items = [f"{n}/{rep}/{rng.getrandbits(64):016x}" for _ in range(n)]
            ours = _ours(items)
            sk = ds.hll_sketch(12)
            for it in items:
                sk.update(it)
            theirs = sk.get_estimate()
            assert abs(ours - n) <= 3 * RSE * n + 1, (n, ours)
            if n:
                se_ours += ((ours - n) / n) ** 2
                se_ds += ((theirs - n) / n) ** 2
                worst = max(worst, abs(ours - n) / n)
        rmse_ours, rmse_ds = math.sqrt(se_ours / reps), math.sqrt(se_ds / reps)
        rows.append((n, reps, rmse_ours, worst, rmse_ds))
        if n >= 100:
            assert rmse_ours <= 0.02, (n, rmse_ours)
    report = "\n".join(f"n={n:>7} reps={reps:>2} ours rmse={a:.4f} worst={w:.4f}  datasketches rmse={b:.4f}"
                       for n, reps, a, w, b in rows)
    print("\nHyperLogLog relative error (3 sigma = %.4f)\n%s" % (3 * RSE, report))
    record_property("hll_accuracy", report)


def test_hll_small_counts():
    """SPEC §2.4 (standard error <= 2%): for small distinct counts the estimate
    (linear counting over 4096 registers) is within 1 of the linear-counting
    value ``m ln(m / empty registers)``, so exact up to register collisions and
    rounding, and exactly 0 for no items. Reported for comparison: DataSketches
    keeps exact coupons at small counts, so it is exact there; ours is off by
    one at 64 items even without a collision (4096 ln(4096/4032) = 64.5)."""
    assert hll_estimate({}) == 0
    rng = random.Random(3)
    for n in (1, 2, 5, 10, 30, 64, 100):
        items = [f"{n}:{rng.getrandbits(64)}" for _ in range(n)]
        regs: dict[int, int] = {}
        for it in items:
            slot, rho = hll_coupon(it)
            regs[slot] = max(regs.get(slot, 0), rho)
        lc = HLL_M * math.log(HLL_M / (HLL_M - len(regs)))
        assert abs(_ours(items) - lc) <= 1, (n, _ours(items), lc)
