"""``writer.sweep``: the numpy kernel of point-in-time reads against brute force (SPEC §3.2, §3.3).

No Spark here: :func:`writer.sweep.sweep_table` is called on pyarrow tables
shaped like one aggregate's bucket, and :func:`writer.sweep._sweep_group_bucket`
on a key group's shared rows (Chronon CHIP-11), both compared with a
quadratic oracle that applies the rule read by read.

The rule (SPEC §3.2 with the window rule of section 2; ``writer.pointintime``'s
and ``writer.sweep``'s module docstrings): with ``T(x) = floor(x / r)``, a
write of the read's key at time ``s`` with arrival ``seq_w`` counts for a read
at ``t`` with arrival ``seq_r`` iff

* ``T(s) > T(t - W)`` (the window), and
* ``(s, seq_w) < (t, seq_r)``, or it is the read's own event (same ``seq``)
  and the aggregate is inclusive, and
* with ``after a`` on the read: ``T(s) > T(a)``;

``limit n`` then keeps the ``n`` latest counted writes by (time, arrival).
``Decayed*`` have no window (nor ``after``) and weigh a write
``exp(-(t - s) / W)``. A read with a null key gets ``n == -1`` and a null.

Checked:

* :func:`count_below` and :func:`range_ranks_min` (the merge-sort tree and
  the sparse table) against direct counts and minima, for hypothesis-drawn
  arrays (empty ones, lengths that are not powers of two) and exhaustively
  for every range of arrays around powers of two;
* :func:`sweep_table` for every function it sweeps, with random windows and
  resolutions, ``limit``, inclusive or not, ``after`` times (or null), null
  keys, several keys (``""`` among them), same-millisecond ties, reads and
  writes of one event, times around window/resolution boundaries and across
  the decay epochs of :data:`compiler.algebra.arrow.EPOCH_WINDOWS`, rows shuffled:
  ``n`` exactly, ``a`` exactly (HyperLogLog: the integer of
  ``compiler.algebra.ops.hll_estimate``) or, for floats, to
  ``rel_tol=1e-9, abs_tol=1e-12``. Where ``n == 0`` the caller substitutes
  the empty value (``writer.pointintime``), so ``a`` is only asserted null
  for the functions whose empty value is null (``Sum`` may also give its
  empty value 0);
* struct payloads (``Set``/``Sequence``/``Latest``/``Min``: field by field,
  by position not name), float payloads with negatives and infinities, and
  string payloads in byte order for ``Min``/``Max``;
* small explicit cases (a lone inclusive/exclusive event, window, ``after``
  and ``limit`` boundaries, decay weights, payload orders), checked against
  hand-computed values and the oracle, so that a wrong oracle cannot agree
  with a wrong kernel unnoticed;
* int ``Sum``/``Average`` at 64 bits (``Sum`` exact up to ``2**63 - 1``,
  null beyond, as ``try_sum`` and the store's ``HINCRBY``; ``Average`` the
  mean, as Spark's ``avg`` and the store's float sum), and the refusal of a
  bucket too wide for the int64 sort key. The two cases near 2**63 caught a
  float-threshold overflow guard and int64-wrapping averages in the first
  kernel;
* a key group's bucket (``writer.sweep.sweep_group``): up to four parts of
  different functions, windows, ``limit``/inclusive/``after`` settings over
  shared rows, an event reading and writing a part on rows of different
  key values (or of one value twice), null read keys: each part's reads get
  the oracle's values over that part's own writes; output in bounded
  batches; the mask words' bit layout.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import NamedTuple

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler.algebra.ops import hll_estimate
from compiler.algebra.arrow import EPOCH_WINDOWS
from compiler.algebra.arrow import count_below, count_distinct, range_ranks_min, range_sums
from writer.sweep import SweepSpec, sweep_table

#: Functions whose ``a`` is not specified when ``n == 0`` (the caller substitutes the empty value).
#: ``Sum`` is among them: its empty value is 0, and the kernel gives 0 (not null) for a read
#: with no write when another read of the bucket has some.
EMPTY_BY_CALLER = frozenset({"Count", "CountUnique", "HyperLogLog", "Sequence", "Set", "Sum"})
#: The payload column each function reads (as ``writer.pointintime`` builds it); read rows hold nulls.
X_FUNCTIONS = frozenset({"Sum", "Average", "DecayedSum", "DecayedAverage"})
P_FUNCTIONS = frozenset({"Min", "Max", "Latest", "First", "Sequence", "Set"})

KEYS = ("a", "b", "", "é", None)
UNITS = (1, 300, 1000, 7000, 100_000)  # one per bucket; times are base + k * unit (+-1), k in 0..20
BASES = (0, -250_000, 1_700_000_000_123)
STRINGS = st.sampled_from(("x", "y", "z", "w", "", "Z", "a", "ab", "é", "😀"))
INTS = st.one_of(st.integers(-5, 5), st.integers(-10**12, 10**12))
NICE_FLOATS = st.sampled_from((0.5, 1.25, -2.0, 3.1, 0.1, -7.75))
FLOATS = st.one_of(NICE_FLOATS, st.floats(-1000.0, 1000.0, allow_nan=False, allow_subnormal=False))
SUM_FLOATS = st.one_of(FLOATS, st.sampled_from((math.inf, -math.inf, math.nan)))
PAYLOAD_FLOATS = st.one_of(
    st.sampled_from((-0.5, -2.0, 3.1, 0.0, -0.0, -1e300, 1e-300, math.inf, -math.inf)),
    st.floats(allow_nan=False))
#: Struct payloads: the first field is named ``z`` and the second ``a``, so an order by name would show.
STRUCT = pa.struct([("z", pa.string()), ("a", pa.int64())])
STRUCTS = st.tuples(st.sampled_from(("", "a", "b", "é")), st.integers(-2, 2))


class Event(NamedTuple):
    """One row of a bucket: a write (``role`` 0) or a read (``role`` 1)."""

    rk: str | None
    t: int
    seq: int
    role: int
    ra: int | None
    x: object
    p: object
    u: str
    slot: int
    rho: int


# -------------------------------------------------------------------- oracle
def _ieee_sum(xs: list[float]) -> float:
    """The exactly rounded sum of floats, with IEEE infinities and NaN."""
    if any(math.isnan(x) for x in xs) or (math.inf in xs and -math.inf in xs):
        return math.nan
    if math.inf in xs:
        return math.inf
    if -math.inf in xs:
        return -math.inf
    return math.fsum(xs)


def counted(spec: SweepSpec, read: Event, writes: list[Event]) -> list[Event]:
    """The writes ``read`` counts, in (time, arrival) order: the rule of the module docstring, directly."""
    W, r = spec.window_ms, spec.resolution_ms
    out = []
    for w in writes:
        if w.rk != read.rk:
            continue
        # SPEC §3.3: arrived before the read (seq: arrival) with a time <= its own, or its own write
        if not ((w.t <= read.t and w.seq < read.seq) or (spec.inclusive and w.seq == read.seq)):
            continue
        if not spec.function.startswith("Decayed"):
            if not w.t // r > (read.t - W) // r:
                continue
            if read.ra is not None and not w.t // r > read.ra // r:
                continue
        out.append(w)
    out.sort(key=lambda w: (w.t, w.seq))
    if spec.limit is not None:
        out = out[-spec.limit:]
    return out


def brute(spec: SweepSpec, events: list[Event]) -> dict[int, tuple[object, int]]:
    """``{r_seq: (a, n)}`` for every read of ``events`` (``a`` None where no write counts)."""
    fn, W = spec.function, spec.window_ms
    writes = [e for e in events if e.role == 0]
    out: dict[int, tuple[object, int]] = {}
    for e in events:
        if e.role != 1:
            continue
        if e.rk is None:
            out[e.seq] = (None, -1)
            continue
        cs = counted(spec, e, writes)
        n = len(cs)
        a: object = None
        if fn == "Count":
            a = n
        elif fn == "CountUnique":
            a = len({w.u for w in cs})
        elif fn == "HyperLogLog":
            regs: dict[int, int] = {}
            for w in cs:
                regs[w.slot] = max(regs.get(w.slot, 0), w.rho)
            a = hll_estimate(regs)
        elif fn == "Sequence":
            a = [w.p for w in cs]
        elif fn == "Set":
            a = sorted({w.p for w in cs})
        elif not cs:
            a = None
        elif fn in ("Sum", "Average"):
            xs = [w.x for w in cs]
            s = sum(xs) if spec.int_values else _ieee_sum(xs)
            a = s if fn == "Sum" else s / n
        elif fn == "Min":
            a = min(w.p for w in cs)
        elif fn == "Max":
            a = max(w.p for w in cs)
        elif fn == "Latest":
            a = cs[-1].p
        elif fn == "LatestTime":
            a = cs[-1].t
        elif fn == "First":
            a = cs[0].p
        elif fn == "FirstTime":
            a = cs[0].t
        elif fn == "DecayedCount":
            a = math.fsum(math.exp(-(e.t - w.t) / W) for w in cs)
        elif fn == "DecayedSum":
            a = math.fsum(w.x * math.exp(-(e.t - w.t) / W) for w in cs)
        elif fn == "DecayedAverage":
            # weights relative to the latest counted write: the same ratio, no underflow to 0 / 0
            last = cs[-1].t
            ws = [math.exp(-(last - w.t) / W) for w in cs]
            a = math.fsum(w.x * k for w, k in zip(cs, ws)) / math.fsum(ws)
        else:
            raise AssertionError(fn)
        if fn.startswith("Decayed"):
            n = 1 if n else 0
        out[e.seq] = (a, n)
    return out


def _plain(v: object) -> object:
    """A kernel value as the oracle holds it: structs as tuples (field order), lists element-wise."""
    if isinstance(v, dict):
        return tuple(_plain(x) for x in v.values())
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return v


def _same(got: object, want: object) -> bool:
    """Equal; floats to ``rel_tol=1e-9, abs_tol=1e-12`` (NaN equals NaN), lists and tuples element-wise."""
    if isinstance(want, (list, tuple)):
        return (type(got) is type(want) and len(got) == len(want)
                and all(_same(g, w) for g, w in zip(got, want)))
    if isinstance(want, float) or isinstance(got, float):
        if got is None or want is None:
            return got is want
        if math.isnan(want) or math.isnan(got):
            return math.isnan(want) and math.isnan(got)
        return math.isclose(got, want, rel_tol=1e-9, abs_tol=1e-12)
    return got == want and type(got) is type(want)


# ------------------------------------------------------------------- buckets
def to_table(spec: SweepSpec, events: list[Event], p_type: pa.DataType = pa.string()) -> pa.Table:
    """One aggregate's bucket for :func:`sweep_table`: the function's payload columns, null on reads."""
    fn = spec.function

    def on_writes(name: str) -> list:
        vals = [getattr(e, name) if e.role == 0 else None for e in events]
        if pa.types.is_struct(p_type) and name == "p":
            return [None if v is None else dict(zip((f.name for f in p_type), v)) for v in vals]
        return vals

    cols = {
        "rk": pa.array([e.rk for e in events], pa.string()),
        "t": pa.array([e.t for e in events], pa.int64()),
        "seq": pa.array([e.seq for e in events], pa.int64()),
        "role": pa.array([e.role for e in events], pa.int8()),
        "ra": pa.array([e.ra for e in events], pa.int64()),
    }
    if fn in X_FUNCTIONS:
        cols["x"] = pa.array(on_writes("x"), pa.int64() if spec.int_values else pa.float64())
    if fn in P_FUNCTIONS:
        cols["p"] = pa.array(on_writes("p"), p_type)
    if fn == "CountUnique":
        cols["u"] = pa.array(on_writes("u"), pa.string())
    if fn == "HyperLogLog":
        cols["slot"] = pa.array(on_writes("slot"), pa.int32())
        cols["rho"] = pa.array(on_writes("rho"), pa.int32())
    return pa.table(cols)


@st.composite
def buckets(draw, fn: str, int_values: bool = False, payload=STRINGS) -> tuple[SweepSpec, list[Event]]:
    """A spec for ``fn`` and a shuffled bucket of events (module docstring)."""
    decayed = fn.startswith("Decayed")
    r = draw(st.sampled_from((1000, 60_000)))
    W = r * draw(st.sampled_from((1, 2, 5, 10)))
    limit = None if decayed else draw(st.one_of(st.none(), st.integers(1, 3)))
    spec = SweepSpec(fn, W, r, limit, draw(st.booleans()), int_values)
    if int_values:
        xs = INTS
    elif decayed:
        xs = NICE_FLOATS  # bounded terms: the kernel's decayed sums are exact to ~1e-14 absolute
    elif fn in ("Sum", "Average"):
        xs = SUM_FLOATS
    else:
        xs = FLOATS
    if decayed:
        # decay epochs of E = EPOCH_WINDOWS * W: a boundary inside the bucket's span (writes carried
        # from the previous epoch), and units of E / 7 (writes more than one epoch older, dropped)
        E = EPOCH_WINDOWS * W
        unit = draw(st.sampled_from(UNITS + (E // 7,)))
        base = (draw(st.sampled_from((-1, 0, 1, 5_666_667))) * E - draw(st.integers(0, 20)) * unit
                + draw(st.sampled_from((0, -1, 1))))
    else:
        unit = draw(st.sampled_from(UNITS))  # one time scale per bucket: dense enough for windows and limits
        base = draw(st.sampled_from(BASES))
    keys = draw(st.lists(st.sampled_from(KEYS[:-1]), min_size=1, max_size=3, unique=True))
    if draw(st.booleans()):
        keys.append(None)
    size = draw(st.integers(0, 40))
    raw = draw(st.lists(st.tuples(
        st.sampled_from(keys),
        st.integers(0, 20), st.sampled_from((0, 0, 0, -1, 1)),  # time: base + k * unit + (-1, 0 or 1)
        st.sampled_from(((0,), (1,), (0, 1))),  # a write, a read, or both of one event
        st.one_of(st.none(), st.integers(-130_000, 5_000)),  # after, relative to the time
        xs, payload, st.sampled_from("uvw"),
        st.one_of(st.integers(0, 5), st.integers(0, 4095)), st.integers(1, 53),  # HyperLogLog coupon
    ), min_size=size, max_size=size))
    events = []
    for seq, (rk, k, jit, roles, da, x, p, u, slot, rho) in enumerate(raw):
        t = base + k * unit + jit
        for role in roles:
            if role == 0 and rk is None:
                continue  # writes have a key; only reads can have a null one
            ra = None if role == 0 or da is None else t + da
            events.append(Event(rk, t, seq, role, ra, x, p, u, slot, rho))
    order = draw(st.permutations(range(len(events))))
    return spec, [events[i] for i in order]


def check(spec: SweepSpec, events: list[Event], p_type: pa.DataType = pa.string()) -> None:
    """Assert that the kernel's ``n`` and ``a`` equal the oracle's for every read."""
    res = sweep_table(to_table(spec, events, p_type), spec)
    assert res.column_names == ["r_seq", "a", "n"]
    rows = res.to_pylist()
    assert Counter(row["r_seq"] for row in rows) == Counter(e.seq for e in events if e.role == 1)
    want = brute(spec, events)
    fn = spec.function
    for row in rows:
        a, n = want[row["r_seq"]]
        got_a, got_n = _plain(row["a"]), row["n"]
        msg = f"{spec}: read {row['r_seq']} got (a={got_a!r}, n={got_n}), want (a={a!r}, n={n})"
        assert got_n == n, msg
        if n == 0 and fn in EMPTY_BY_CALLER:
            # the caller substitutes the empty value; the kernel may give it or null
            assert fn != "Sum" or got_a in (None, 0), msg
            continue
        if n <= 0:
            assert got_a is None, msg
        else:
            assert _same(got_a, a), msg


# ---------------------------------------------------------------- primitives
@st.composite
def count_queries(draw):
    """``vals`` in ``[-1, m]`` and queries ``0 <= lo <= hi <= m`` with bounds in ``[0, m]``."""
    m = draw(st.integers(0, 130))
    vals = draw(st.lists(st.integers(-1, m), min_size=m, max_size=m))
    qs = draw(st.lists(st.tuples(st.integers(0, m), st.integers(0, m), st.integers(0, m)), max_size=25))
    return vals, [(min(a, b), max(a, b), c) for a, b, c in qs]


def _i64(xs) -> np.ndarray:
    return np.array(list(xs), dtype=np.int64)


@settings(max_examples=300, deadline=None)
@given(count_queries())
def test_count_below_equals_direct_count(case):
    """count_below counts ``vals[lo:hi] < bound`` exactly, empty arrays and queries included."""
    vals, qs = case
    got = count_below(_i64(vals), _i64(q[0] for q in qs), _i64(q[1] for q in qs), _i64(q[2] for q in qs))
    assert got.dtype == np.int64
    assert got.tolist() == [sum(1 for v in vals[lo:hi] if v < b) for lo, hi, b in qs]


@st.composite
def distinct_queries(draw):
    """Writes of a few keys (in runs, as a bucket's sort leaves them) with previous-occurrence indexes, and
    queries: sliding windows in any order (the fast path) or arbitrary ranges (the merge-sort tree)."""
    keys = sorted(draw(st.lists(st.integers(0, 3), max_size=120)))
    vals = draw(st.lists(st.integers(0, 5), min_size=len(keys), max_size=len(keys)))
    prev, last = [], {}
    for i, kv in enumerate(zip(keys, vals)):
        prev.append(last.get(kv, -1))
        last[kv] = i
    m = len(keys)
    if draw(st.booleans()):  # windows of one width, or limit-like: lo and hi rise together
        his = sorted(draw(st.lists(st.integers(0, m), max_size=25)))
        width = draw(st.integers(0, m + 1))
        los = [max(0, h - width) for h in his]
        qs = draw(st.permutations(list(zip(los, his))))
    else:
        qs = [(min(a, b), max(a, b)) for a, b in draw(st.lists(st.tuples(st.integers(0, m), st.integers(0, m)),
                                                               max_size=25))]
    return prev, qs


@settings(max_examples=400, deadline=None)
@given(distinct_queries())
def test_count_distinct_equals_direct_count(case):
    """count_distinct counts the writes of ``[lo, hi)`` whose previous occurrence lies before ``lo`` (the
    distinct values there), by the sweep of its sliding-window path or by the merge-sort tree."""
    prev, qs = case
    got = count_distinct(_i64(prev), _i64(q[0] for q in qs), _i64(q[1] for q in qs))
    assert got.dtype == np.int64
    assert got.tolist() == [sum(1 for k in range(lo, hi) if prev[k] < lo) for lo, hi in qs]


@st.composite
def min_queries(draw):
    """Arbitrary int64 ranks (negative ones too, as ``Max`` negates them) and non-empty ranges."""
    m = draw(st.integers(1, 130))
    ranks = draw(st.lists(st.integers(-2**62, 2**62), min_size=m, max_size=m))
    qs = []
    for _ in range(draw(st.integers(0, 25))):
        lo = draw(st.integers(0, m - 1))
        qs.append((lo, draw(st.integers(lo + 1, m))))
    return ranks, qs


@settings(max_examples=300, deadline=None)
@given(min_queries())
def test_range_ranks_min_equals_min(case):
    """range_ranks_min is ``min(ranks[lo:hi])`` for every non-empty range."""
    ranks, qs = case
    got = range_ranks_min(_i64(ranks), _i64(q[0] for q in qs), _i64(q[1] for q in qs))
    assert got.tolist() == [min(ranks[lo:hi]) for lo, hi in qs]


@pytest.mark.parametrize("m", [1, 2, 3, 4, 5, 7, 8, 9, 15, 16, 17, 31, 32, 33, 63, 64, 65])
def test_primitives_on_every_range(m):
    """Both primitives on every range of arrays around powers of two (all bounds for count_below)."""
    rng = np.random.default_rng(m)
    vals = rng.integers(-1, m + 1, size=m)
    lo, hi = (_i64(x) for x in zip(*[(a, b) for a in range(m + 1) for b in range(a, m + 1)]))
    for bound in range(m + 1):
        got = count_below(vals, lo, hi, np.full(len(lo), bound, dtype=np.int64))
        assert got.tolist() == [int((vals[a:b] < bound).sum()) for a, b in zip(lo, hi)], bound
    ranks = rng.integers(-50, 50, size=m)
    ne = hi > lo
    got = range_ranks_min(ranks, lo[ne], hi[ne])
    assert got.tolist() == [int(ranks[a:b].min()) for a, b in zip(lo[ne], hi[ne])]


# --------------------------------------------------------------------- sweep
SWEPT = [("Count", False), ("Sum", True), ("Sum", False), ("Average", True), ("Average", False),
         ("Min", False), ("Max", False), ("CountUnique", False), ("Latest", False), ("LatestTime", False),
         ("First", False), ("FirstTime", False), ("Sequence", False), ("Set", False), ("HyperLogLog", False),
         ("DecayedCount", False), ("DecayedSum", False), ("DecayedAverage", False)]


@pytest.mark.parametrize("fn,int_values", SWEPT, ids=[f"{f}-{'int' if i else 'float'}" if f in ("Sum", "Average")
                                                     else f for f, i in SWEPT])
@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_sweep_equals_brute_force(fn, int_values, data):
    """sweep_table gives every read the oracle's n and aggregate, for every swept function."""
    spec, events = data.draw(buckets(fn, int_values))
    check(spec, events)


@pytest.mark.parametrize("fn", ["Set", "Sequence", "Latest", "Min", "Max", "First"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_sweep_struct_payload(fn, data):
    """Struct payloads: Set distinct and sorted field by field (by position), Min/Max likewise, picks whole."""
    spec, events = data.draw(buckets(fn, payload=STRUCTS))
    check(spec, events, STRUCT)


@pytest.mark.parametrize("fn", ["Min", "Max"])
@pytest.mark.parametrize("kind", ["float", "string"])
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_sweep_min_max_float_and_string(fn, kind, data):
    """Min/Max of floats (negatives, zeros, infinities) by value and of strings in byte order."""
    payload, p_type = (PAYLOAD_FLOATS, pa.float64()) if kind == "float" else (STRINGS, pa.string())
    spec, events = data.draw(buckets(fn, payload=payload))
    check(spec, events, p_type)


# ---------------------------------------------------------- explicit cases
def _ev(rk, t, seq, role, ra=None, x=1.0, p="v"):
    return Event(rk, t, seq, role, ra, x, p, "u", 0, 1)


def _kernel(spec: SweepSpec, events: list[Event]) -> dict[int, tuple[object, int]]:
    return {row["r_seq"]: (row["a"], row["n"]) for row in sweep_table(to_table(spec, events), spec).to_pylist()}


@pytest.mark.parametrize("inclusive,want_n", [(True, 1), (False, 0)])
def test_inclusive_decides_own_write(inclusive, want_n):
    """A lone event that writes and reads: inclusive Count 1, exclusive 0 (kernel and oracle)."""
    spec = SweepSpec("Count", 60_000, 1000, None, inclusive)
    events = [_ev("k", 5000, 7, 1), _ev("k", 5000, 7, 0)]
    assert _kernel(spec, events)[7][1] == want_n
    assert brute(spec, events)[7][1] == want_n
    check(spec, events)


def test_window_after_and_limit_boundaries():
    """W = 2 s, r = 1 s, reads at 3.5 s: writes from 2.0 s count (1.999 s not); after 2.5 s, from 3.0 s."""
    events = [_ev("k", 1999, 1, 0, p="a"), _ev("k", 2000, 2, 0, p="b"), _ev("k", 3000, 3, 0, p="c"),
              _ev("k", 3500, 4, 0, p="d"), _ev("k", 3500, 6, 0, p="e"),  # seq 6: after read 5, before read 8
              _ev("k", 3500, 5, 1), _ev("k", 3500, 8, 1, ra=2500), _ev(None, 3500, 9, 1), _ev("j", 3500, 10, 1)]
    cases = [
        (SweepSpec("Count", 2000, 1000, None, False), {5: (3, 3), 8: (3, 3)}),
        (SweepSpec("Count", 2000, 1000, 2, True), {5: (2, 2), 8: (2, 2)}),
        (SweepSpec("First", 2000, 1000, None, False), {5: ("b", 3), 8: ("c", 3)}),
        (SweepSpec("First", 2000, 1000, 1, False), {5: ("d", 1), 8: ("e", 1)}),
        (SweepSpec("Latest", 2000, 1000, None, True), {5: ("d", 3), 8: ("e", 3)}),
        (SweepSpec("Sequence", 2000, 1000, 2, False), {5: (["c", "d"], 2), 8: (["d", "e"], 2)}),
        (SweepSpec("Count", 1000, 1000, None, False), {5: (2, 2), 8: (3, 3)}),  # W = r: from 3.0 s
    ]
    for spec, want in cases:
        want |= {9: (None, -1), 10: (None, 0)}  # a null key; a key without writes
        got, oracle = _kernel(spec, events), brute(spec, events)
        for seq, (a, n) in want.items():
            assert oracle[seq][1] == n and got[seq][1] == n, (spec, seq, oracle[seq], got[seq])
            if n != 0:
                assert _same(oracle[seq][0], a) and _same(_plain(got[seq][0]), a), (spec, seq, oracle[seq], got[seq])
        check(spec, events)


def test_decayed_weighs_by_age():
    """DecayedCount of writes 0 and W before the read is 1 + 1/e; DecayedAverage weighs values alike."""
    W = 60_000
    events = [_ev("k", 0, 1, 0, x=2.0), _ev("k", W, 2, 0, x=4.0), _ev("k", W, 3, 1)]
    got = _kernel(SweepSpec("DecayedCount", W, 1000, None, False), events)[3]
    assert got[1] == 1 and math.isclose(got[0], 1 + math.exp(-1), rel_tol=1e-12)
    got = _kernel(SweepSpec("DecayedAverage", W, 1000, None, False), events)[3]
    assert math.isclose(got[0], (2.0 * math.exp(-1) + 4.0) / (math.exp(-1) + 1), rel_tol=1e-12)
    for fn in ("DecayedCount", "DecayedSum", "DecayedAverage"):
        check(SweepSpec(fn, W, 1000, None, False), events)


@pytest.mark.filterwarnings("error::RuntimeWarning")
@pytest.mark.parametrize("fn", ["DecayedCount", "DecayedSum", "DecayedAverage"])
def test_decayed_read_without_writes_overflows_nothing(fn):
    """A read of a key without writes, beside another key's write 10^6 windows later: null, and no warning.

    The kernel once weighed such a read by ``exp`` of the other key's write age (10^6 here) before masking it:
    ``RuntimeWarning: overflow encountered in exp`` in a replay's log.
    """
    W = 1000
    events = [_ev("a", 0, 1, 1), _ev("b", 10**9, 2, 0, x=2.0), _ev("b", 10**9, 3, 1)]
    spec = SweepSpec(fn, W, 1000, None, False)
    got = _kernel(spec, events)
    assert got[1] == (None, 0)
    assert got[3] == (1.0 if fn == "DecayedCount" else 2.0, 1)
    check(spec, events)


def _lone_key(fn: str, payloads: list, p_type: pa.DataType = pa.string(), int_values: bool = False):
    """One key's writes at 0, 1, .. ms (payload ``p`` or value ``x``) and a read after them: ``(a, n)``."""
    k = len(payloads)
    events = [Event("k", i, i, 0, None, v, v, "u", 0, 1) for i, v in enumerate(payloads)]
    events.append(Event("k", k, k, 1, None, None, None, "u", 0, 1))
    spec = SweepSpec(fn, 60_000, 1000, None, False, int_values)
    row = sweep_table(to_table(spec, events, p_type), spec).to_pylist()[0]
    return _plain(row["a"]), row["n"]


def test_payload_orders_explicit():
    """Set/Min/Max of structs by field position, floats by value (negatives), strings by bytes."""
    structs = [("b", 1), ("a", 2), ("a", 1), ("a", 2)]
    assert _lone_key("Set", structs, STRUCT) == ([("a", 1), ("a", 2), ("b", 1)], 4)  # by name: a=1,1,2 first
    assert _lone_key("Min", structs, STRUCT) == (("a", 1), 4)
    assert _lone_key("Max", structs, STRUCT) == (("b", 1), 4)
    assert _lone_key("Sequence", structs, STRUCT) == (structs, 4)
    floats = [-0.5, -3.0, 2.0, -math.inf, 1e-300]
    assert _lone_key("Min", floats, pa.float64()) == (-math.inf, 5)
    assert _lone_key("Max", floats[:3], pa.float64()) == (2.0, 3)
    assert _lone_key("Min", floats[:2], pa.float64()) == (-3.0, 2)
    strings = ["a", "Z", "é", "ab", "😀", ""]
    assert _lone_key("Min", strings[:5]) == ("Z", 5)
    assert _lone_key("Max", strings) == ("😀", 6)
    assert _lone_key("Set", strings) == (["", "Z", "a", "ab", "é", "😀"], 6)


@pytest.mark.parametrize("fn,xs,want", [
    # beyond 64 bits: null (try_sum; the store's HINCRBY fails)
    ("Sum", [2**62, 2**62], None),
    ("Sum", [-2**62, -2**62 - 1], None),
    # fits in int64 although above 9.2e18 (a float threshold would call it an overflow)
    ("Sum", [4_605_000_000_000_000_000, 4_605_000_000_000_000_000], 9_210_000_000_000_000_000),
    ("Sum", [2**62, 2**62 - 1], 2**63 - 1),
    # the mean even where the int64 total would wrap (Spark's avg and the store's AverageOp sum doubles)
    ("Average", [2**62, 2**62], 2.0**62),
    ("Average", [4_605_000_000_000_000_000, 4_605_000_000_000_000_000], 4.605e18),
], ids=["sum-overflow", "sum-underflow", "sum-fits-9.21e18", "sum-fits-max", "average-beyond-64-bits",
        "average-near-64-bits"])
def test_int_sum_and_average_at_64_bits(fn, xs, want):
    """Int Sum is exact up to 2**63 - 1 and null beyond; int Average of large ints is their mean."""
    assert _same(_lone_key(fn, xs, int_values=True), (want, len(xs)))


def test_too_wide_bucket_is_refused():
    """A bucket whose keys times time span overflow the int64 sort key raises ValueError; just below, exact."""
    spec = SweepSpec("Count", 2 * 10**18, 1000, None, False)
    ok = [_ev("k", 0, 1, 0), _ev("k", 2**60, 2, 0), _ev("k", 2**60, 3, 1)]
    assert _kernel(spec, ok)[3] == (2, 2)
    check(spec, ok)
    with pytest.raises(ValueError, match="too wide"):
        sweep_table(to_table(spec, [_ev("k", 0, 1, 0), _ev("k", 2**61, 2, 1)]), spec)


def _group_table(rows: list[dict], n_parts: int) -> pa.Table:
    """A key group's bucket (``writer.sweep.sweep_group``): shared rows, mask words, shared payload columns."""
    from writer.sweep import mask_bits

    words: dict[str, list[int]] = {mask_bits(i)[0]: [0] * len(rows) for i in range(n_parts)}
    for j, row in enumerate(rows):
        for i in range(n_parts):
            col, wb, rb = mask_bits(i)
            words[col][j] |= (wb if i in row["w"] else 0) | (rb if i in row["r"] else 0)
    return pa.table({
        "k": pa.array([r["k"] for r in rows], pa.string()),
        "t": pa.array([r["t"] for r in rows], pa.int64()),
        "seq": pa.array([r["seq"] for r in rows], pa.int64()),
        "e": pa.array([7] * len(rows), pa.int32()),
        **{col: pa.array(v, pa.int64()) for col, v in words.items()},
        "cx": pa.array([r["x"] for r in rows], pa.float64()),
        "cp": pa.array([r["p"] for r in rows], pa.string()),
        "cu": pa.array([r["u"] for r in rows], pa.string()),
        "ca": pa.array([r["ra"] for r in rows], pa.int64()),
    })


GROUP_FUNCTIONS = ("Count", "Sum", "Average", "Max", "CountUnique", "Latest", "LatestTime", "First", "Sequence",
                   "Set", "DecayedSum", "DecayedAverage")


@st.composite
def group_buckets(draw, max_parts: int = 4):
    """Specs of a key group and its shared rows: each event has one or two rows (key values), and each
    part reads on one of them (or none) and writes on one of them (or none), as a topology reading by
    ``dest`` and writing by ``origin`` does."""
    n_parts = draw(st.integers(1, max_parts))
    specs = []
    for _ in range(n_parts):
        fn = draw(st.sampled_from(GROUP_FUNCTIONS))
        decayed = fn.startswith("Decayed")
        r = draw(st.sampled_from((1000, 60_000)))
        limit = None if decayed else draw(st.one_of(st.none(), st.integers(1, 3)))
        specs.append(SweepSpec(fn, r * draw(st.sampled_from((1, 2, 5, 10))), r, limit, draw(st.booleans())))
    afters = [draw(st.booleans()) for _ in specs]
    unit = draw(st.sampled_from(UNITS))
    base = draw(st.sampled_from(BASES))
    keys = draw(st.lists(st.sampled_from(KEYS[:-1]), min_size=1, max_size=3, unique=True)) + [None]
    rows = []
    for seq in range(draw(st.integers(0, 30))):
        t = base + draw(st.integers(0, 20)) * unit + draw(st.sampled_from((0, 0, -1, 1)))
        ks = draw(st.lists(st.sampled_from(keys), min_size=1, max_size=2))  # one or two key values (may be equal)
        da = draw(st.one_of(st.none(), st.integers(-130_000, 5_000)))
        x, p, u = draw(FLOATS.filter(lambda v: abs(v) < 1e6)), draw(STRINGS), draw(st.sampled_from("uvw"))
        mine = [{"k": k, "t": t, "seq": seq, "x": x, "p": p, "u": u, "ra": None if da is None else t + da,
                 "w": set(), "r": set()} for k in ks]
        for i in range(n_parts):
            read = draw(st.sampled_from([None, *range(len(ks))]))
            write = draw(st.sampled_from([None, *range(len(ks))]))
            if read is not None:
                mine[read]["r"].add(i)
            if write is not None and ks[write] is not None:  # only reads have null keys
                mine[write]["w"].add(i)
        rows += [m for m in mine if m["w"] or m["r"]]
    order = draw(st.permutations(range(len(rows))))
    return specs, afters, [rows[i] for i in order]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_group_bucket_equals_brute_force_per_part(data):
    """A key group's shared rows, swept once per part over its masks, give each part's reads the oracle's values.

    Chronon CHIP-11 row sharing (``writer.sweep.sweep_group``): the oracle sees each part's own writes
    and reads, as ``sweep_table`` would; one event may read and write a part on different rows.
    """
    from compiler.algebra.arrow import KERNELS
    from writer.sweep import _sweep_group_bucket

    specs, afters, rows = data.draw(group_buckets())
    table = _group_table(rows, len(specs))
    payloads = [(("x", "cx"), ("p", "cp"), ("u", "cu")) for _ in specs]
    a_types = [KERNELS[s.function].result_type(pa.string(), False) for s in specs]
    out = _sweep_group_bucket(table, specs, payloads, ["ca" if a else None for a in afters], a_types)
    got = out.to_pylist()
    assert Counter(r["r_seq"] for r in got) == Counter(r["seq"] for r in rows if r["r"])
    for i, spec in enumerate(specs):
        events = []
        for r in rows:
            ra = r["ra"] if afters[i] else None
            if i in r["w"]:
                events.append(Event(r["k"], r["t"], r["seq"], 0, None, r["x"], r["p"], r["u"], 0, 1))
            if i in r["r"]:
                events.append(Event(r["k"], r["t"], r["seq"], 1, ra, None, None, None, 0, 1))
        want = brute(spec, events)
        mine = [r for r in got if r[f"n{i}"] is not None]
        assert sorted(r["r_seq"] for r in mine) == sorted(want)
        for r in mine:
            a, n = want[r["r_seq"]]
            got_a, got_n = _plain(r[f"a{i}"]), r[f"n{i}"]
            msg = f"part {i} {spec}: read {r['r_seq']} got (a={got_a!r}, n={got_n}), want (a={a!r}, n={n})"
            assert got_n == n, msg
            if n == 0 and spec.function in EMPTY_BY_CALLER:
                continue
            if n <= 0:
                assert got_a is None, msg
            else:
                assert _same(got_a, a), msg


def test_group_bucket_batches_and_writes_only_bucket():
    """A group bucket hands back its rows in bounded Arrow batches, and a bucket of writes only gives no rows."""
    from writer.sweep import _sweep_group_bucket, mask_bits

    spec = SweepSpec("Count", 60_000, 1_000, None, True)
    col, wb, rb = mask_bits(0)
    n = 70_000

    def rows(ts, bit):
        return pa.table({"k": ["k"] * len(ts), "t": pa.array(ts, pa.int64()), "seq": pa.array(ts, pa.int64()),
                         "e": pa.array([0] * len(ts), pa.int32()), col: pa.array([bit] * len(ts), pa.int64())})

    writes_only = rows([1, 2], wb)
    out = _sweep_group_bucket(writes_only, [spec], [()], [None], [pa.int64()])
    assert out.num_rows == 0 and out.column_names == ["r_seq", "e", "n0", "a0"]
    out = _sweep_group_bucket(pa.concat_tables([writes_only, rows(list(range(3, n + 3)), rb)]), [spec], [()],
                              [None], [pa.int64()])
    assert out.num_rows == n and max(b.num_rows for b in out.to_batches()) <= 65_536
    assert sorted(out.column("n0").to_pylist())[-1] == 2  # the two writes, at t=1 and 2, before later reads


def test_mask_bits_fill_signed_longs():
    """Two bits per part, 31 parts per long mask word: every bit below 2**62, distinct within a word."""
    from writer.sweep import PARTS_PER_WORD, mask_bits

    seen: dict[str, int] = {}
    for i in range(3 * PARTS_PER_WORD):
        col, wb, rb = mask_bits(i)
        assert col == f"_m{i // PARTS_PER_WORD}" and wb < rb < 2**62 and not (seen.get(col, 0) & (wb | rb))
        seen[col] = seen.get(col, 0) | wb | rb


@pytest.mark.parametrize("m", [1, 2, 3, 5, 8, 9, 16, 17, 33])
def test_range_sums_on_every_range(m):
    """``range_sums`` adds each range of an array around powers of two, infinities and NaN included."""
    rng = np.random.default_rng(m)
    x = rng.normal(size=m) * 10.0 ** rng.integers(-3, 4, size=m)
    if m > 4:
        x[1], x[3] = np.inf, -np.inf
    lo, hi = (_i64(v) for v in zip(*[(a, b) for a in range(m + 1) for b in range(a, m + 1)]))
    got = range_sums(x, lo, hi)
    for g, a, b in zip(got, lo, hi):
        assert _same(float(g), _ieee_sum(x[a:b].tolist())) or math.isclose(g, _ieee_sum(x[a:b].tolist()),
                                                                             rel_tol=1e-12, abs_tol=1e-12)


def test_float_sum_is_not_spoiled_by_an_old_huge_value():
    """A window's float sum keeps its digits after a huge value of the same key left the window.

    Regression: prefix sums carried 9.2e18 (and 1e21) into every later window
    of the key; in long double 11.25 read as 12.0 (fuzzing online against replay).
    """
    W = 2000
    for huge in (9.223372036854775808e18, 1e21, -1e300):
        events = [_ev("k", 0, 1, 0, x=huge), _ev("k", 5000, 2, 0, x=-2.25), _ev("k", 5001, 3, 0, x=1.5),
                  _ev("k", 5002, 4, 0, x=12.0), _ev("k", 5002, 5, 1)]
        for fn, want in (("Sum", 11.25), ("Average", 3.75)):
            spec = SweepSpec(fn, W, 1000, None, False)
            assert _kernel(spec, events)[5] == (want, 3), (huge, fn)
            check(spec, events)
