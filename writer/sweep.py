"""Point-in-time reads as one sort and one vectorised sweep per group of keys (SPEC §2.4, §3.2, §3.3, §5.8).

The shape of Chronon's UnionJoin (CHIP-11): the reads and writes of an
aggregate state are unioned, shuffled once by entity key into buckets
(``groupBy(bucket).applyInArrow``), and each bucket -- many keys, or one
hot key -- is sorted by (key, time, arrival) and swept once with numpy.
Nothing is joined per read, nothing is per row in Python; every function is
``O(n log n)`` in the events of the bucket, whatever the key skew.

The rule (``writer.pointintime``'s module docstring, SPEC §3.2/§3.3): in the
merged order ``(key, time, arrival)`` -- a reading event's own write placed
just before its read when the aggregate is inclusive, just after when not --
the writes a read at ``t`` can count are the writes of its key before it,
from the first one at or after ``lo = (T(t - W) + 1) * r`` (raised to
``(T(a) + 1) * r`` by ``after a``). In write-index space that is one range
``[lo, hi)`` per read; ``limit n`` raises ``lo`` to ``hi - n``. Then, per
function:

* ``Count``: ``hi - lo``; ``Sum``/``Average``: prefix sums (ints exact in
  int64, floats in ``np.longdouble`` so the difference of two prefixes keeps
  the 1e-9 relative of SPEC §3.3; infinities and NaN counted apart);
* ``Min``/``Max``: a sparse table of dense value ranks (range minimum in
  ``O(1)`` per read after ``O(m log m)``), the value taken back by rank;
* ``CountUnique``: the writes in ``[lo, hi)`` whose previous write with the
  same key and value lies before ``lo``, counted with a merge-sort tree
  (Wesley & Xu's distinct counting; what DuckDB and Hyper use for windowed
  ``COUNT(DISTINCT)``): ``O(log^2 m)`` per read, vectorised over reads;
* ``HyperLogLog``: the number of registers with value ``>= v`` is the
  number of distinct slots among the writes in range with ``rho >= v``: one
  distinct count per ``v`` over a subsequence that halves with each ``v``;
  the register histogram then gives Ertl's estimate with the same double
  operations as ``compiler.algebra.ops.hll_estimate`` (its ``sigma``/``tau``
  taken from tables computed by those very functions), so online and replay
  agree to the integer;
* ``Latest``/``LatestTime``: write ``hi - 1``; ``First``/``FirstTime``:
  write ``lo``; ``Sequence``: writes ``lo..hi-1``; ``Set``: their distinct
  values, ascending (dense ranks, as Spark's ``array_sort``);
* ``Decayed*``: the recurrence of ``writer.pitreads.decayed_values``
  (prefix sums of ``v * exp((s - A) / W)`` per epoch of
  :data:`writer.pitreads.EPOCH_WINDOWS` windows, the previous epoch carried),
  as segmented scans; a read decays its key's latest write before it.

Arrival order that is not time order (SPEC §3.3 as revised; issue 12 makes
it exact everywhere): a read then counts the writes of its key with time in
``[lo, t]`` *and* arrival before its own. Sorted by (key, time), that is the
same range ``[lo, hi)`` with one more bound, ``seq < r_seq``: ``Count`` is
:func:`count_below` over the writes' arrival numbers; ``Sum``/``Average``
and ``Min``/``Max`` keep, per merge-sort-tree node, prefix sums or minima in
arrival order (``O(log^2 m)`` per read); ``Latest``/``First`` and ``limit
n`` are order statistics over the same nodes. ``CountUnique`` and the
HyperLogLog histogram gain a third dimension (the previous occurrence among
the writes that arrived earlier): an offline pass in arrival order with a
Fenwick tree over time positions, or a persistent merge-sort tree, keeps
them ``O(m log^2 m)``. None of that is done here: replay
keeps the time-order rule that the online path implements today.

Table exchanged with Spark (one bucket per call):

* in: ``rk`` (string, null for a read with a null key component), ``t``
  (long ms), ``seq`` (long arrival), ``role`` (byte: 0 write, 1 read),
  ``ra`` (long ``after`` time or null), and per function ``x`` (numeric
  value), ``p`` (payload: the value or a struct of values), ``u`` (the
  encoded value tuple), ``slot``/``rho`` (HyperLogLog coupon);
* out: ``r_seq`` (long), ``a`` (the aggregate before the empty-window rule),
  ``n`` (long: counted writes; ``-1`` for a null key).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["SweepPart", "SweepSpec", "count_below", "range_ranks_min", "sweep_stage", "sweep_table", "sweep_union"]

#: Rows per Arrow batch handed back to Spark by a bucket's sweep.
_OUT_BATCH_ROWS = 65_536

#: Functions whose value is taken from one write (its index in write order).
_PICK = frozenset({"Latest", "LatestTime", "First", "FirstTime"})


@dataclass(frozen=True)
class SweepSpec:
    """What one sweep computes.

    Attributes:
        function: the aggregate function (SPEC §2.4 table).
        window_ms: window ``W`` in ms (the decay constant of ``Decayed*``).
        resolution_ms: resolution ``r`` in ms (SPEC §3.2).
        limit: ``limit n`` or None.
        inclusive: whether a read counts its own event's write (SPEC §3.3).
        int_values: ``Sum``/``Average`` over ints (exact int64 sums).
    """

    function: str
    window_ms: int
    resolution_ms: int
    limit: int | None
    inclusive: bool
    int_values: bool = False


# ---------------------------------------------------------------- primitives
def count_below(vals: np.ndarray, lo: np.ndarray, hi: np.ndarray, bound: np.ndarray) -> np.ndarray:
    """For each query ``q``: how many ``k`` in ``[lo[q], hi[q])`` have ``vals[k] < bound[q]``.

    A merge-sort tree built level by level over a power-of-two padding of
    ``vals`` and walked bottom-up like an iterative segment tree, all
    queries at once per level: ``O(m log^2 m + q log^2 m)``.

    Args:
        vals: int64 values, each in ``[-1, len(vals)]``.
        lo, hi: int64 query ranges (``0 <= lo <= hi <= len(vals)``).
        bound: int64 bounds, each in ``[0, len(vals)]``.

    Returns:
        int64 counts, one per query.
    """
    m = len(vals)
    out = np.zeros(len(lo), dtype=np.int64)
    if m == 0 or len(lo) == 0:
        return out
    size = 1 << max(0, (m - 1).bit_length())
    width = m + 3  # shifted values lie in [0, m + 2)
    level = np.full(size, m + 1, dtype=np.int64)
    level[:m] = vals + 1
    x = bound.astype(np.int64) + 1
    left, right = lo.astype(np.int64).copy(), hi.astype(np.int64).copy()
    block = 1
    while True:
        active = left < right
        if not active.any():
            break
        nblocks = size // block
        flat = (level.reshape(nblocks, block) + (np.arange(nblocks, dtype=np.int64) * width)[:, None]).ravel()
        take = active & ((left & 1) == 1)
        if take.any():
            b = left[take]
            out[take] += np.searchsorted(flat, b * width + x[take], "left") - b * block
            left[take] += 1
        take = active & ((right & 1) == 1)
        if take.any():
            right[take] -= 1
            b = right[take]
            out[take] += np.searchsorted(flat, b * width + x[take], "left") - b * block
        left >>= 1
        right >>= 1
        if nblocks == 1:
            break
        block *= 2
        level = np.sort(level.reshape(size // block, block), axis=1, kind="stable").ravel()
    return out


def range_ranks_min(ranks: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Minimum of ``ranks[lo:hi]`` per query (non-empty ranges), by a sparse table.

    Level ``L`` of the table holds ``min(ranks[i : i + 2^L])``; a query of
    length ``len`` takes the two (overlapping) blocks of level
    ``floor(log2 len)``. ``O(m log m)`` to build, ``O(1)`` per query.

    Args:
        ranks: int64 array.
        lo, hi: int64 query ranges with ``lo < hi``.

    Returns:
        int64 minima, one per query.
    """
    out = np.empty(len(lo), dtype=np.int64)
    if len(lo) == 0:
        return out
    length = hi - lo
    k = np.zeros(len(lo), dtype=np.int64)
    k[:] = np.floor(np.log2(np.maximum(length, 1))).astype(np.int64)
    k[(np.int64(1) << k) > length] -= 1  # log2 rounding at powers of two
    k[(np.int64(1) << (k + 1)) <= length] += 1
    table = ranks
    top = int(k.max())
    for level in range(top + 1):
        sel = np.flatnonzero(k == level)
        if len(sel):
            out[sel] = np.minimum(table[lo[sel]], table[hi[sel] - (1 << level)])
        if level < top:
            half = 1 << level
            table = np.minimum(table[:-half], table[half:])
    return out


def _dense_ranks(arr: pa.Array) -> np.ndarray:
    """Dense ascending ranks (0-based) of a non-null Arrow array; structs field by field."""
    if pa.types.is_struct(arr.type):
        cols = [_dense_ranks(arr.field(i)) for i in range(arr.type.num_fields)]
        if not cols:
            return np.zeros(len(arr), dtype=np.int64)
        order = np.lexsort(cols[::-1])
        keys = np.stack([c[order] for c in cols], axis=1)
        new = np.ones(len(order), dtype=bool)
        if len(order) > 1:
            new[1:] = (keys[1:] != keys[:-1]).any(axis=1)
        ranks = np.empty(len(order), dtype=np.int64)
        ranks[order] = np.cumsum(new) - 1
        return ranks
    if len(arr) == 0:
        return np.zeros(0, dtype=np.int64)
    return pc.rank(arr, sort_keys="ascending", tiebreaker="dense").to_numpy(zero_copy_only=False).astype(np.int64) - 1


def _segmented_scan(values: np.ndarray, seg: np.ndarray) -> np.ndarray:
    """Inclusive prefix sums of ``values`` restarting where ``seg`` changes (contiguous segments).

    Hillis-Steele doubling: ``O(m log L)`` for segments of length ``<= L``,
    no subtraction (no cancellation between segments).
    """
    x = values.astype(np.float64).copy()
    d = 1
    n = len(x)
    while d < n:
        same = seg[d:] == seg[:-d]
        if not same.any():
            break
        x[d:] = np.where(same, x[d:] + x[:-d], x[d:])
        d *= 2
    return x


def _ranges_index(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Offsets (int32, one more than ranges) and the concatenated indices ``lo..hi-1`` of each range."""
    lengths = np.maximum(hi - lo, 0)
    offsets = np.zeros(len(lo) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    total = int(offsets[-1])
    idx = np.arange(total, dtype=np.int64) + np.repeat(lo - offsets[:-1], lengths)
    return offsets, idx


@functools.lru_cache(maxsize=1)
def _hll_tables() -> tuple[np.ndarray, np.ndarray]:
    """``tau`` and ``sigma`` of ``ops.hll_estimate`` for every register count 0..m (computed by those functions)."""
    from compiler.algebra.ops import HLL_M, _sigma, _tau

    tau = np.array([_tau(1.0 - c / HLL_M) for c in range(HLL_M + 1)], dtype=np.float64)
    sigma = np.array([_sigma(c / HLL_M) if c < HLL_M else math.inf for c in range(HLL_M + 1)], dtype=np.float64)
    return tau, sigma


# ---------------------------------------------------------------------- sweep
def sweep_table(table: pa.Table, spec: SweepSpec) -> pa.Table:
    """The point-in-time aggregate of every read in one bucket (module docstring).

    Args:
        table: the bucket's reads and writes (columns in the module docstring).
        spec: what to compute.

    Returns:
        ``r_seq`` (int64), ``a`` (typed per function: int64 for counts and
        times, float64 for averages and decayed values, the payload's type
        for picks, ``Min``/``Max``, lists for ``Sequence``/``Set``), ``n``
        (int64), one row per read.

    Raises:
        ValueError: an unknown function, or a bucket whose keys and time span
            do not fit the int64 sort key.
    """
    fn = spec.function
    role = table.column("role").to_numpy(zero_copy_only=False).astype(np.int8)
    t_all = table.column("t").to_numpy(zero_copy_only=False).astype(np.int64)
    seq_all = table.column("seq").to_numpy(zero_copy_only=False).astype(np.int64)
    rk = table.column("rk").combine_chunks() if table.num_rows else pa.array([], pa.string())
    enc = pc.dictionary_encode(rk)
    kid_all = enc.indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)

    is_read = role == 1
    read_rows = np.flatnonzero(is_read)
    r_seq_out = seq_all[read_rows]
    n_out = np.full(len(read_rows), -1, dtype=np.int64)
    a_type = _result_type(table, spec)

    valid = kid_all >= 0
    rows = np.flatnonzero(valid)
    # merged order: key, time, arrival, then write before read when inclusive
    tie = role[rows] if spec.inclusive else (1 - role[rows])
    order = rows[np.lexsort((tie, seq_all[rows], t_all[rows], kid_all[rows]))]
    o_write = role[order] == 0
    w_rows = order[o_write]  # table rows of the writes, in write order
    m = len(w_rows)
    before = np.cumsum(o_write) - o_write  # writes before each merged position
    r_pos = np.flatnonzero(~o_write)
    r_rows = order[r_pos]  # table rows of the keyed reads, in merged order
    hi = before[r_pos].astype(np.int64)
    r_kid = kid_all[r_rows]
    r_t = t_all[r_rows]
    w_kid = kid_all[w_rows]
    w_t = t_all[w_rows]

    decayed = fn.startswith("Decayed")
    # first write of the read's key (key_start) and first one inside the window (lo)
    tmin = int(t_all[rows].min()) if len(rows) else 0
    tmax = int(t_all[rows].max()) if len(rows) else 0
    span = tmax - tmin + 2
    nkeys = int(kid_all.max()) + 2 if len(kid_all) else 1
    if span * nkeys >= (1 << 62):
        raise ValueError(f"bucket too wide for the sweep's sort key ({nkeys} keys over {span} ms)")
    w_comp = w_kid * span + (w_t - tmin)
    key_start = np.searchsorted(w_comp, r_kid * span, "left")
    if decayed:
        lo = key_start
    else:
        W, r = spec.window_ms, spec.resolution_ms
        lo_t = (np.floor_divide(r_t - W, r) + 1) * r
        if "ra" in table.column_names:
            ra_col = table.column("ra").combine_chunks().take(pa.array(r_rows))
            has_a = ra_col.is_valid().to_numpy(zero_copy_only=False)
            if has_a.any():
                ra = ra_col.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
                lo_a = (np.floor_divide(ra, r) + 1) * r
                lo_t = np.where(has_a, np.maximum(lo_t, lo_a), lo_t)
        rel = np.clip(lo_t - tmin, 0, span - 1)
        lo = np.searchsorted(w_comp, r_kid * span + rel, "left")
    lo = np.minimum(lo, hi)
    if spec.limit is not None:
        lo = np.maximum(lo, hi - spec.limit)
    n = hi - lo

    # results in merged-read order, then scattered to the table's read order
    r_index = np.searchsorted(read_rows, r_rows)
    n_out[r_index] = n
    if (n > 0).any():
        a_vals = _compute(fn, spec, table, w_rows, w_kid, w_t, lo, hi, n, r_t, m)
    else:
        a_vals = pa.nulls(len(lo), a_type)
    a_full = _scatter(a_vals, r_index, len(read_rows), a_type)
    if decayed:
        n_out[r_index] = (n > 0).astype(np.int64)
    return pa.table({"r_seq": pa.array(r_seq_out, pa.int64()), "a": a_full, "n": pa.array(n_out, pa.int64())})


def _result_type(table: pa.Table, spec: SweepSpec) -> pa.DataType:
    fn = spec.function
    if fn in ("Count", "CountUnique", "HyperLogLog", "LatestTime", "FirstTime"):
        return pa.int64()
    if fn == "Sum":
        return pa.int64() if spec.int_values else pa.float64()
    if fn in ("Average", "DecayedCount", "DecayedSum", "DecayedAverage"):
        return pa.float64()
    p = table.schema.field("p").type
    if fn in ("Sequence", "Set"):
        return pa.list_(p)
    return p


def _scatter(values: pa.Array, index: np.ndarray, size: int, typ: pa.DataType) -> pa.Array:
    """An array of ``size`` (null where no value) with ``values[i]`` at ``index[i]``."""
    if len(index) == size:
        inv = np.empty(size, dtype=np.int64)
        inv[index] = np.arange(size, dtype=np.int64)
        return values.take(pa.array(inv)).cast(typ)
    pos = np.full(size, len(values), dtype=np.int64)
    pos[index] = np.arange(len(index), dtype=np.int64)
    padded = pa.concat_arrays([values.cast(typ), pa.nulls(1, typ)])
    return padded.take(pa.array(pos))


def _w_numpy(table: pa.Table, name: str, w_rows: np.ndarray, dtype) -> np.ndarray:
    col = table.column(name).combine_chunks().take(pa.array(w_rows))
    return col.fill_null(0).to_numpy(zero_copy_only=False).astype(dtype)


def _masked(values: np.ndarray, keep: np.ndarray, typ: pa.DataType) -> pa.Array:
    return pa.array(values, typ, mask=~keep)


def _compute(fn: str, spec: SweepSpec, table: pa.Table, w_rows, w_kid, w_t, lo, hi, n, r_t,
             m: int) -> pa.Array:
    """The aggregate per keyed read (merged-read order), null where no write counts."""
    has = n > 0
    if fn == "Count":
        return pa.array(n, pa.int64())
    if fn in ("Sum", "Average"):
        if spec.int_values and fn == "Sum":
            # int64 prefix sums wrap, so a difference is the exact sum modulo 2^64; a long-double
            # estimate picks the multiple of 2^64 and so tells an int64 total from an overflow
            x = _w_numpy(table, "x", w_rows, np.int64)
            pre = np.zeros(m + 1, dtype=np.int64)
            with np.errstate(over="ignore"):
                np.cumsum(x, out=pre[1:])
                s = pre[hi] - pre[lo]
            pref = np.zeros(m + 1, dtype=np.longdouble)
            np.cumsum(x.astype(np.longdouble), out=pref[1:])
            est = pref[hi] - pref[lo]
            wraps = np.rint((est - s.astype(np.longdouble)) / np.longdouble(2.0**64))
            return _masked(s, wraps == 0, pa.int64())
        # floats, and int averages (summed as doubles, as Spark's avg and the store's Average)
        x = _w_numpy(table, "x", w_rows, np.int64 if spec.int_values else np.float64).astype(np.float64)
        s = _float_range_sums(x, lo, hi)
        if fn == "Sum":
            return pa.array(s, pa.float64())
        return _masked(s / np.maximum(n, 1), has, pa.float64())
    if fn in ("Min", "Max"):
        p = table.column("p").combine_chunks().take(pa.array(w_rows))
        ranks = _dense_ranks(p)
        if fn == "Max":
            ranks = -ranks
        idx = np.flatnonzero(has)
        best = np.zeros(len(lo), dtype=np.int64)
        best[idx] = range_ranks_min(ranks, lo[idx], hi[idx])
        # one write holding each rank
        holder = np.zeros(int(ranks.max()) - int(ranks.min()) + 1 if m else 1, dtype=np.int64)
        base = int(ranks.min()) if m else 0
        holder[ranks - base] = np.arange(m, dtype=np.int64)
        pick = np.where(has, holder[best - base] if m else 0, 0)
        return _pick(p, pick, has)
    if fn in _PICK:
        pick = np.where(has, hi - 1 if fn.startswith("Latest") else lo, 0)
        if fn.endswith("Time"):
            return _masked(w_t[np.minimum(pick, max(m - 1, 0))] if m else np.zeros(len(lo), np.int64), has,
                           pa.int64())
        p = table.column("p").combine_chunks().take(pa.array(w_rows))
        return _pick(p, pick, has)
    if fn == "Sequence":
        p = table.column("p").combine_chunks().take(pa.array(w_rows))
        offsets, idx = _ranges_index(lo, hi)
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), p.take(pa.array(idx)))
    if fn == "Set":
        p = table.column("p").combine_chunks().take(pa.array(w_rows))
        ranks = _dense_ranks(p) if m else np.zeros(0, np.int64)
        offsets, idx = _ranges_index(lo, hi)
        owner = np.repeat(np.arange(len(lo), dtype=np.int64), np.maximum(hi - lo, 0))
        nr = int(ranks.max()) + 1 if m else 1
        comp = np.unique(owner * nr + ranks[idx]) if len(idx) else np.zeros(0, np.int64)
        own, rank = comp // nr, comp % nr
        holder = np.zeros(nr, dtype=np.int64)
        if m:
            holder[ranks] = np.arange(m, dtype=np.int64)
        counts = np.bincount(own, minlength=len(lo)) if len(own) else np.zeros(len(lo), np.int64)
        offs = np.zeros(len(lo) + 1, dtype=np.int64)
        np.cumsum(counts, out=offs[1:])
        return pa.ListArray.from_arrays(pa.array(offs.astype(np.int32)), p.take(pa.array(holder[rank])))
    if fn == "CountUnique":
        u = table.column("u").combine_chunks().take(pa.array(w_rows))
        vid = pc.dictionary_encode(u).indices.to_numpy(zero_copy_only=False).astype(np.int64)
        prev = _previous(w_kid, vid)
        return pa.array(count_below(prev, lo, hi, lo), pa.int64())
    if fn == "HyperLogLog":
        slot = _w_numpy(table, "slot", w_rows, np.int64)
        rho = _w_numpy(table, "rho", w_rows, np.int64)
        return pa.array(_hll(w_kid, slot, rho, lo, hi), pa.int64())
    if fn.startswith("Decayed"):
        return _decayed(fn, spec, table, w_rows, w_kid, w_t, lo, hi, n, r_t, m)
    raise ValueError(f"aggregate function {fn} has no sweep")


def _pick(p: pa.Array, pick: np.ndarray, has: np.ndarray) -> pa.Array:
    """``p[pick[i]]``, null where ``has[i]`` is false."""
    if len(p) == 0:
        return pa.nulls(len(pick), p.type)
    return p.take(pa.array(np.minimum(pick, len(p) - 1), pa.int64(), mask=~has))


def _float_range_sums(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Sums of ``x[lo:hi]``: long-double prefix sums of the finite values, infinities and NaN counted apart."""
    finite = np.isfinite(x)
    m = len(x)
    pre = np.zeros(m + 1, dtype=np.longdouble)
    np.cumsum(np.where(finite, x, 0.0).astype(np.longdouble), out=pre[1:])
    s = (pre[hi] - pre[lo]).astype(np.float64)
    if finite.all():
        return s

    def cnt(mask: np.ndarray) -> np.ndarray:
        c = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(mask, out=c[1:])
        return c[hi] - c[lo]

    nan, pos, neg = cnt(np.isnan(x)), cnt(x == np.inf), cnt(x == -np.inf)
    s = np.where(pos > 0, np.inf, s)
    s = np.where(neg > 0, -np.inf, s)
    return np.where((nan > 0) | ((pos > 0) & (neg > 0)), np.nan, s)


def _previous(kid: np.ndarray, vid: np.ndarray) -> np.ndarray:
    """Index of the previous write with the same key and value (-1 if none), writes in key order."""
    m = len(kid)
    idx = np.arange(m, dtype=np.int64)
    order = np.lexsort((idx, vid, kid))
    prev = np.full(m, -1, dtype=np.int64)
    if m > 1:
        same = (kid[order][1:] == kid[order][:-1]) & (vid[order][1:] == vid[order][:-1])
        prev[order[1:][same]] = order[:-1][same]
    return prev


def _hll(kid, slot, rho, lo, hi) -> np.ndarray:
    """Ertl's estimate per read over the register-wise max of the writes in ``[lo, hi)`` (module docstring)."""
    from compiler.algebra.ops import HLL_M, HLL_Q

    tau, sigma = _hll_tables()
    q = len(lo)
    at_least = np.zeros((HLL_Q + 3, q), dtype=np.int64)  # at_least[v]: registers >= v
    for v in range(1, HLL_Q + 2):
        keep = rho >= v
        if not keep.any():
            break
        pos = np.zeros(len(rho) + 1, dtype=np.int64)
        np.cumsum(keep, out=pos[1:])
        sub_lo, sub_hi = pos[lo], pos[hi]
        prev = _previous(kid[keep], slot[keep])
        at_least[v] = count_below(prev, sub_lo, sub_hi, sub_lo)
    c = at_least[:-1] - at_least[1:]  # c[v] = registers == v, for v >= 1
    c0 = HLL_M - at_least[1]
    z = HLL_M * tau[c[HLL_Q + 1]]
    for k in range(HLL_Q, 0, -1):
        z = 0.5 * (z + c[k])
    z = z + HLL_M * sigma[c0]
    with np.errstate(divide="ignore"):
        est = (HLL_M * HLL_M / (2.0 * math.log(2.0))) / z
    big = ~np.isfinite(est) | (est >= 2.0**63)
    out = np.where(big, 0.0, np.rint(est)).astype(np.int64)
    out[big] = 2**63 - 1
    out[at_least[1] == 0] = 0
    return out


def _decayed(fn, spec, table, w_rows, w_kid, w_t, lo, hi, n, r_t, m) -> pa.Array:
    """``Decayed*`` by the epoch recurrence of ``writer.pitreads.decayed_values``."""
    from writer.pitreads import EPOCH_WINDOWS

    W = float(spec.window_ms)
    E = EPOCH_WINDOWS * spec.window_ms
    has = n > 0
    if m == 0:
        return pa.nulls(len(lo), pa.float64())
    v = np.ones(m) if fn == "DecayedCount" else _w_numpy(table, "x", w_rows, np.float64)
    e = np.floor_divide(w_t, E)
    grow = np.exp((w_t - e * E).astype(np.float64) / W)
    seg = w_kid * (int(e.max()) - int(e.min()) + 2) + (e - int(e.min()))
    pv = _segmented_scan(v * grow, seg)
    pw = _segmented_scan(grow, seg)
    # previous epoch's totals: the last write of segment (key, e - 1)
    last = np.ones(m, dtype=bool)
    last[:-1] = seg[1:] != seg[:-1]
    seg_last = np.flatnonzero(last)
    seg_ids = seg[seg_last]
    want = seg - 1
    j = np.searchsorted(seg_ids, want)
    j_ok = (j < len(seg_ids)) & (seg_ids[np.minimum(j, len(seg_ids) - 1)] == want)
    # (key, e - 1) is seg - 1: ids leave a gap between keys (span of epochs + 2), so seg - 1 is never another key's
    src = seg_last[np.minimum(j, len(seg_ids) - 1)]
    qv = np.where(j_ok, pv[src], 0.0)
    qw = np.where(j_ok, pw[src], 0.0)
    since = (w_t - e * E).astype(np.float64)
    down = np.exp(-since / W)
    carried = np.exp(-(since + float(E)) / W)
    dv = pv * down + qv * carried
    dw = pw * down + qw * carried
    last_w = np.maximum(hi - 1, 0)
    if fn == "DecayedAverage":
        with np.errstate(invalid="ignore", divide="ignore"):
            a = dv[last_w] / dw[last_w]
        return _masked(a, has & (dw[last_w] > 0), pa.float64())
    f = np.exp(-(r_t - w_t[last_w]).astype(np.float64) / W)
    a = (dw[last_w] if fn == "DecayedCount" else dv[last_w]) * f
    return _masked(a, has, pa.float64())


# ---------------------------------------------------------------------- Spark
@dataclass(frozen=True)
class SweepPart:
    """One aggregate of a batched sweep (:func:`sweep_stage`).

    Attributes:
        frame: its reads and writes, unioned (:func:`sweep_union`).
        spec: what to compute.
        payload: its payload columns in ``frame`` (``x_<g>``, ``p_<g>``, ...),
            by kernel name (``x``, ``p``, ``u``, ``slot``, ``rho``).
        a_type: the Spark type of its ``a`` column.
        a_column: the name of its result column in :func:`sweep_stage`'s
            output (shared by the parts of the same result type).
    """

    frame: object
    spec: SweepSpec
    payload: tuple[tuple[str, str], ...]
    a_type: object
    a_column: str


def _type_tag(data_type) -> str:
    """A short column-name suffix for a Spark type: parts of one type share a column."""
    import hashlib

    return hashlib.md5(data_type.simpleString().encode()).hexdigest()[:10]


def sweep_union(reads, writes, function: str, value_types, names, inclusive: bool, window_ms: int,
                resolution_ms: int, limit: int | None, g: int) -> SweepPart:
    """The reads and writes of one aggregate as one frame for :func:`sweep_stage`.

    Args:
        reads: ``r_seq``, ``r_t``, ``r_rk`` (null for a null key), ``r_a``
            (``writer.pointintime``'s read frame).
        writes: ``w_rk``, ``t``, ``seq``, ``v0..`` (the state's counted writes).
        function: the aggregate function.
        value_types, names: the state's value types and value names (struct
            payloads of ``Latest``/``First``/``Sequence``; ``Set`` tuples are
            ``_1, _2, ..``).
        inclusive: whether a read counts its own event's write.
        window_ms, resolution_ms: ``W`` and ``r`` in ms.
        limit: ``limit n`` or None.
        g: the aggregate's number in its batch (column ``g``). Payload
            columns are named by kernel name and type (``p_<tag>``), so the
            parts of a batch share them: a unioned row carries a few columns,
            not a few per aggregate.

    Returns:
        A :class:`SweepPart`: columns ``g``, ``rk``, ``t``, ``seq``,
        ``role``, ``ra`` and the payload columns the function needs (module
        docstring), computed with Spark built-ins.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import ArrayType, DoubleType, LongType

    from writer.tiles import encode_tuple_column, hll_coupon_columns

    vals = [F.col(f"v{i}") for i in range(len(value_types))]
    fn = function
    int_values = bool(value_types) and value_types[0] == "int" and fn in ("Sum", "Average")
    payload: dict[str, object] = {}
    if fn in ("Sum", "Average", "DecayedSum", "DecayedAverage"):
        payload["x"] = vals[0].cast("long" if int_values else "double")
    elif fn in ("Min", "Max", "Latest", "First", "Sequence"):
        payload["p"] = vals[0] if len(vals) == 1 else F.struct(*[v.alias(nm) for v, nm in zip(vals, names)])
    elif fn == "Set":
        payload["p"] = vals[0] if len(vals) == 1 else F.struct(*[v.alias(f"_{i + 1}") for i, v in enumerate(vals)])
    elif fn == "CountUnique":
        payload["u"] = encode_tuple_column(vals, value_types)
    elif fn == "HyperLogLog":
        slot, rho = hll_coupon_columns(encode_tuple_column(vals, value_types))
        payload["slot"], payload["rho"] = slot, rho
    probe = writes.select(*[c.alias(k) for k, c in payload.items()]).schema  # analysis only
    cols = {k: f"{k}_{_type_tag(probe[k].dataType)}" for k in payload}
    w = writes.select(F.lit(g).alias("g"), F.col("w_rk").alias("rk"), "t", "seq", F.lit(0).cast("byte").alias("role"),
                      F.lit(None).cast("long").alias("ra"), *[c.alias(cols[k]) for k, c in payload.items()])
    typed = {f.name: f.dataType for f in w.schema.fields}
    r = reads.select(F.lit(g).alias("g"), F.col("r_rk").alias("rk"), F.col("r_t").alias("t"),
                     F.col("r_seq").alias("seq"), F.lit(1).cast("byte").alias("role"),
                     F.col("r_a").cast("long").alias("ra"),
                     *[F.lit(None).cast(typed[cols[k]]).alias(cols[k]) for k in payload])
    if fn in ("Count", "CountUnique", "HyperLogLog", "LatestTime", "FirstTime") or (fn == "Sum" and int_values):
        a_type = LongType()
    elif fn in ("Sum", "Average") or fn.startswith("Decayed"):
        a_type = DoubleType()
    elif fn in ("Sequence", "Set"):
        a_type = ArrayType(typed[cols["p"]])
    else:
        a_type = typed[cols["p"]]
    spec = SweepSpec(fn, int(window_ms), int(resolution_ms), limit, inclusive, int_values)
    return SweepPart(w.unionByName(r), spec, tuple(cols.items()), a_type, f"a_{_type_tag(a_type)}")


def sweep_stage(parts: list[SweepPart], buckets: int):
    """Point-in-time values of several aggregates in one shuffle and one sweep per key bucket.

    The parts' frames are unioned, shuffled once by ``(g, rk)`` into
    ``buckets`` groups (``groupBy(bucket).applyInArrow``), and each bucket
    sweeps each of its aggregates (:func:`sweep_table`).

    Args:
        parts: the aggregates (:func:`sweep_union`, ``g`` = position).
        buckets: number of key buckets (one Python call each).

    Returns:
        A DataFrame ``r_seq``, ``g``, ``n`` (``-1`` for a null key) and one
        result column per result type (``SweepPart.a_column``; a row's
        value is in its part's column): one row per (part, read).

    Raises:
        ValueError: (in the tasks) a function without a sweep.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.types import IntegerType, LongType, StructField, StructType

    frame = parts[0].frame
    for p in parts[1:]:
        frame = frame.unionByName(p.frame, allowMissingColumns=True)
    frame = frame.withColumn("_b", F.pmod(F.xxhash64("g", "rk"), F.lit(buckets)))
    fields = [StructField("r_seq", LongType()), StructField("g", IntegerType()), StructField("n", LongType())]
    a_cols: dict[str, object] = {}
    for p in parts:
        a_cols.setdefault(p.a_column, p.a_type)
    fields += [StructField(name, typ) for name, typ in a_cols.items()]
    schema = StructType(fields)
    from pyspark.sql.pandas.types import to_arrow_type

    specs = [p.spec for p in parts]
    payloads = [p.payload for p in parts]
    outputs = [(name, to_arrow_type(typ)) for name, typ in a_cols.items()]
    a_of = [p.a_column for p in parts]

    def sweep_bucket(table: pa.Table) -> pa.Table:
        # a plain function with type hints: applyInArrow infers its form from them
        return _sweep_bucket(table, specs, payloads, outputs, a_of)

    return frame.groupBy("_b").applyInArrow(sweep_bucket, schema)


def _sweep_bucket(table: pa.Table, specs: list[SweepSpec], payloads, outputs: list[tuple[str, pa.DataType]],
                  a_of: list[str]) -> pa.Table:
    """One bucket of :func:`sweep_stage`: each aggregate present, swept apart; wide output."""
    gcol = table.column("g").to_numpy(zero_copy_only=False)
    parts = []
    for g in np.unique(gcol):
        g = int(g)
        sel = pa.array(np.flatnonzero(gcol == g))
        cols = {k: table.column(k).take(sel) for k in ("rk", "t", "seq", "role", "ra")}
        for kernel_name, col in payloads[g]:
            cols[kernel_name] = table.column(col).take(sel)
        parts.append((g, sweep_table(pa.table(cols), specs[g])))
    total = sum(res.num_rows for _, res in parts)
    out = {
        "r_seq": pa.concat_arrays([res.column("r_seq").combine_chunks() for _, res in parts] or [pa.array([], pa.int64())]),
        "g": pa.array(np.concatenate([np.full(res.num_rows, g, dtype=np.int32) for g, res in parts] or
                                     [np.zeros(0, np.int32)])),
        "n": pa.concat_arrays([res.column("n").combine_chunks() for _, res in parts] or [pa.array([], pa.int64())]),
    }
    for name, typ in outputs:
        pieces = []
        for h, res in parts:
            pieces.append(res.column("a").combine_chunks().cast(typ) if a_of[h] == name else pa.nulls(res.num_rows, typ))
        out[name] = pa.concat_arrays(pieces) if pieces else pa.nulls(total, typ)
    # in batches: one Arrow batch of a hot key's millions of rows would be one JVM allocation
    table = pa.table(out)
    return pa.Table.from_batches(table.to_batches(max_chunksize=_OUT_BATCH_ROWS), schema=table.schema)
