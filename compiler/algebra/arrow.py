"""The Arrow/numpy target of the aggregate algebra: replay's per-function sweep kernels (SPEC §2.4, §3.2, §5.8).

``writer.sweep`` sorts one bucket of an aggregate's reads and writes by
(key, time, arrival) and turns every keyed read into a range ``[lo, hi)`` of
the writes in that order: the writes it counts (SPEC §3.2, §3.3; ``limit n``
already applied). A kernel of :data:`KERNELS` (one per function of
``compiler.algebra.registry``) then computes the aggregate of every range at
once, vectorised with numpy over Arrow arrays, in Spark's ``mapInArrow``
batches (no per-row Python):

* ``Count``: ``hi - lo``; ``Sum``/``Average``: ints by int64 prefix sums
  (exact modulo 2^64, a long-double estimate tells a total outside int64),
  floats by long-double prefix sums where their rounding bound is small
  beside the range, else a segment tree (:func:`range_sums`: an old huge
  value does not cost later windows their low digits; infinities and NaN
  counted apart);
* ``Min``/``Max``: a sparse table of dense value ranks (range minimum in
  ``O(1)`` per read after ``O(m log m)``), the value taken back by rank;
* ``CountUnique``: the writes in ``[lo, hi)`` whose previous write with the
  same key and value lies before ``lo`` (Wesley & Xu's distinct counting;
  what DuckDB and Hyper use for windowed ``COUNT(DISTINCT)``),
  :func:`count_distinct`: for sliding ranges (``lo`` rising with ``hi``:
  windows, ``limit``) each repeated write adds to one interval of reads
  (two binary searches and a difference array, ``O((m + q) log q)``);
  other ranges (``after``) count with a merge-sort tree
  (:func:`count_below`, ``O(log^2 m)`` per read), vectorised over reads;
* ``HyperLogLog``: the number of registers with value ``>= v`` is the
  number of distinct slots among the writes in range with ``rho >= v``: one
  distinct count per ``v`` over a subsequence that halves with each ``v``
  (up to the greatest ``rho`` written, ~20 rows of counts, not 54);
  the register histogram then gives Ertl's estimate with the same double
  operations as ``compiler.algebra.ops.hll_estimate`` (its ``sigma``/``tau``
  taken from tables computed by those very functions), so online and replay
  agree to the integer;
* ``Latest``/``LatestTime``: write ``hi - 1``; ``First``/``FirstTime``:
  write ``lo``; ``Sequence``: writes ``lo..hi-1``; ``Set``: their distinct
  values, ascending (dense ranks, as Spark's ``array_sort``);
* ``Decayed*`` (no window: ``lo`` is the key's first write): the store's
  recurrence (``ops.DecayedOp``: sums weighed to the latest write, decayed
  to the read) as prefix sums of ``v * exp((s - A) / W)`` around an anchor
  ``A`` per epoch of :data:`EPOCH_WINDOWS` windows, so that no exponent
  exceeds ``EPOCH_WINDOWS`` (doubles reach ``e^709``); the previous epoch's
  total is carried in, older epochs weigh below ``e^-EPOCH_WINDOWS`` (about
  ``1e-130``) relative to it and are left out; a read decays its key's
  latest write before it.

A kernel's input is a :class:`Batch`: the writes in write order (payload
columns by kernel name: ``x`` numeric value, ``p`` the value or a struct of
values, ``u`` the encoded value tuple, ``slot``/``rho`` the HyperLogLog
coupon, from ``compiler.algebra.spark.SparkAggregate.sweep_columns``) and the
ranges. Its output: the aggregate per range, null where no write counts.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["Batch", "EPOCH_WINDOWS", "KERNELS", "Kernel", "count_below", "count_distinct", "range_ranks_min"]

#: Length, in windows, of the epochs the decayed prefix sums are anchored on.
EPOCH_WINDOWS = 300


@dataclass(frozen=True)
class Batch:
    """One aggregate's writes in a key bucket, in (key, time, arrival) order, and its reads' ranges.

    Attributes:
        table: the bucket's rows (payload columns by kernel name).
        w_rows: int64 table rows of the writes, in write order (``m`` of them).
        w_kid: int64 key number of each write (ascending).
        w_t: int64 event time (ms) of each write.
        lo, hi: int64 per keyed read: its counted writes are ``[lo, hi)``.
        r_t: int64 per keyed read: its event time (ms).
        window_ms: the window ``W`` in ms (the decay constant of ``Decayed*``).
        int_values: the first value type is ``int`` (int64 sums).
    """

    table: pa.Table
    w_rows: np.ndarray
    w_kid: np.ndarray
    w_t: np.ndarray
    lo: np.ndarray
    hi: np.ndarray
    r_t: np.ndarray
    window_ms: int
    int_values: bool

    @property
    def m(self) -> int:
        """Number of writes."""
        return len(self.w_rows)

    @property
    def n(self) -> np.ndarray:
        """Counted writes per read (``hi - lo``)."""
        return self.hi - self.lo

    def column(self, name: str) -> pa.Array:
        """Payload column ``name`` of the writes, in write order."""
        return self.table.column(name).combine_chunks().take(pa.array(self.w_rows))

    def numpy(self, name: str, dtype) -> np.ndarray:
        """Payload column ``name`` of the writes as a numpy array of ``dtype`` (nulls as 0)."""
        return self.column(name).fill_null(0).to_numpy(zero_copy_only=False).astype(dtype)


class Kernel:
    """The sweep of one aggregate function: ``kernel(batch) -> pa.Array`` and its result type.

    Attributes:
        windowless: every earlier write of the key counts (``Decayed*``: no window).
    """

    windowless = False

    def result_type(self, payload: pa.DataType | None, int_values: bool) -> pa.DataType:
        """The Arrow type of the aggregate, given the type of the ``p`` payload (None without one)."""
        return pa.int64()

    def __call__(self, b: Batch) -> pa.Array:  # pragma: no cover - abstract
        """The aggregate of each read's range ``[lo, hi)``, null where no write counts."""
        raise NotImplementedError


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


def count_distinct(prev: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """For each query ``q``: how many ``k`` in ``[lo[q], hi[q])`` have ``prev[k] < lo[q]`` (distinct values in range).

    ``prev[k]`` is the index of the previous occurrence of ``k``'s value
    (``-1`` for none), so the count is the number of distinct values of
    ``[lo, hi)`` (:func:`count_below` with ``bound = lo``). When the ranges,
    ordered by ``hi``, have non-decreasing ``lo`` too -- sliding windows
    over one write order, however many keys share it (their writes lie in
    disjoint runs), with ``limit`` -- each ``k`` with ``prev[k] >= 0`` lies
    *repeated* in the queries from the first whose ``hi`` passes ``k`` to
    the last whose ``lo`` is at most ``prev[k]``: one interval of queries,
    found by two binary searches, so ``O((m + q) log q)`` with a difference
    array; the count is ``hi - lo`` less the repeats. Other ranges (``after``
    raising ``lo`` read by read) take :func:`count_below`'s merge-sort tree.

    Args:
        prev: int64, ``-1 <= prev[k] < k``.
        lo, hi: int64 query ranges (``0 <= lo <= hi <= len(prev)``).

    Returns:
        int64 counts, one per query.

    Source: the sliding-window form of distinct counting over
    previous-occurrence indexes (Wesley & Xu, "Incremental Computation of
    Common Windowed Holistic Aggregates", VLDB 2016, section 4).
    """
    n = len(lo)
    if n == 0 or len(prev) == 0:
        return np.zeros(n, dtype=np.int64)
    order = np.lexsort((lo, hi))
    slo, shi = lo[order], hi[order]
    if n > 1 and bool((slo[1:] < slo[:-1]).any()):
        return count_below(prev, lo, hi, lo)
    k = np.flatnonzero(prev >= 0)
    first = np.searchsorted(shi, k, "right")  # the first query whose range reaches past k
    last = np.searchsorted(slo, prev[k], "right")  # queries before it start at or before prev[k]
    live = first < last
    repeats = np.cumsum(np.bincount(first[live], minlength=n + 1) - np.bincount(last[live], minlength=n + 1))[:n]
    out = np.empty(n, dtype=np.int64)
    out[order] = (shi - slo) - repeats
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


def _pick(p: pa.Array, pick: np.ndarray, has: np.ndarray) -> pa.Array:
    """``p[pick[i]]``, null where ``has[i]`` is false."""
    if len(p) == 0:
        return pa.nulls(len(pick), p.type)
    return p.take(pa.array(np.minimum(pick, len(p) - 1), pa.int64(), mask=~has))


def _tree_sums(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Sums of ``x[lo:hi]`` from a long-double segment tree: each adds at most ``2 log2(m)`` nodes inside its range.

    Long double, as the prefix sums: int values (int ``Average``) up to 2**63
    keep their exact sum while it stays below 2**64.
    """
    m = len(x)
    size = 1 << max(0, (m - 1).bit_length())
    tree = np.zeros(2 * size + 1, dtype=np.longdouble)  # + 1: a finished range's bound may point one past
    tree[size:size + m] = x
    k = size
    acc = np.zeros(len(lo), dtype=np.longdouble)
    with np.errstate(over="ignore", invalid="ignore"):
        while k > 1:  # level by level: node i = node 2i + node 2i + 1
            tree[k // 2:k] = tree[k:2 * k:2] + tree[k + 1:2 * k:2]
            k //= 2
        left = lo.astype(np.int64) + size
        right = hi.astype(np.int64) + size
        active = left < right
        while active.any():
            take = active & (left & 1 == 1)
            acc += np.where(take, tree[left], 0.0)
            left = left + take
            take = active & (right & 1 == 1)
            right = right - take
            acc += np.where(take, tree[right], 0.0)
            left >>= 1
            right >>= 1
            active = left < right
    return acc.astype(np.float64)


def range_sums(x: np.ndarray, lo: np.ndarray, hi: np.ndarray) -> np.ndarray:
    """Sums of float64 ``x[lo:hi]``, each within 1e-11 of its range's magnitudes (SPEC §3.3's 1e-9 relative).

    Long-double prefix sums (``pre[hi] - pre[lo]``) answer a range in O(1),
    but carry every earlier value of the bucket: one huge value (``1e21``)
    cost every later range of its key its low digits, even after it left the
    window (11.25 read 12.0 beside 9.2e18, 0.0 beside 1e21), where the
    store's tile sums add only the window's values. A prefix difference is
    kept where its rounding bound, ``hi * eps * max(|pre[0..hi]|)`` (each
    step of the cumulative sum rounds by at most ``eps`` of its partial
    sum), is at most ``1e-11`` of the sum of ``|x|`` over the range; the
    other ranges are summed from a segment tree (:func:`_tree_sums`), whose
    nodes hold only values inside the range. Infinities and NaN are counted
    apart: a range with NaN, or with both infinities, is NaN, else its
    infinity. ``O(m + q)``, plus ``O(m + q' log m)`` for ``q'`` tree ranges.

    Args:
        x: float64 values (``m`` of them).
        lo, hi: int64 range bounds, ``0 <= lo <= hi <= m`` (``hi`` exclusive).

    Returns:
        float64 sums, one per range (0.0 for an empty range).
    """
    finite = np.isfinite(x)
    m = len(x)
    xf = np.where(finite, x, 0.0)
    pre = np.zeros(m + 1, dtype=np.longdouble)
    np.cumsum(xf.astype(np.longdouble), out=pre[1:])
    s = (pre[hi] - pre[lo]).astype(np.float64)
    if len(lo):  # the bound and the magnitudes in float64: they only need a few digits
        with np.errstate(over="ignore", invalid="ignore"):  # past 1.8e308: inf, then NaN -> loose
            cabs = np.zeros(m + 1, dtype=np.float64)
            np.cumsum(np.abs(xf), out=cabs[1:])
            top = np.maximum.accumulate(np.abs(pre.astype(np.float64)))
            bound = hi * (float(np.finfo(np.longdouble).eps) * 1e11) * top[hi]
            loose = (hi > lo) & ~(bound <= (cabs[hi] - cabs[lo]) * (1 - 1e-9))
        if loose.any():
            s[loose] = _tree_sums(xf, lo[loose], hi[loose])
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
    # at_least[v]: registers >= v, for v = 1.. while some write has rho >= v (above: 0 for every read)
    at_least = [np.zeros(q, dtype=np.int64)]
    for v in range(1, HLL_Q + 2):
        keep = rho >= v
        if not keep.any():
            break
        pos = np.zeros(len(rho) + 1, dtype=np.int64)
        np.cumsum(keep, out=pos[1:])
        sub_lo, sub_hi = pos[lo], pos[hi]
        prev = _previous(kid[keep], slot[keep])
        at_least.append(count_distinct(prev, sub_lo, sub_hi))
    top = len(at_least) - 1  # the greatest v with a row
    at_least.append(np.zeros(q, dtype=np.int64))
    c0 = HLL_M - at_least[1]
    # ops.hll_estimate's double operations, read by read: z = m * tau(1 - c[q+1] / m), halved with each c[k]
    # from k = q down; every c[k] above `top` is 0, and so is tau(1.0), so z is exactly 0.0 until k = top
    if top >= HLL_Q + 1:
        z = HLL_M * tau[at_least[HLL_Q + 1] - at_least[HLL_Q + 2]]
        start = HLL_Q
    else:
        z = np.zeros(q, dtype=np.float64)
        start = top
    for k in range(start, 0, -1):
        z = 0.5 * (z + (at_least[k] - at_least[k + 1]))
    z = z + HLL_M * sigma[c0]
    with np.errstate(divide="ignore"):
        est = (HLL_M * HLL_M / (2.0 * math.log(2.0))) / z
    big = ~np.isfinite(est) | (est >= 2.0**63)
    out = np.where(big, 0.0, np.rint(est)).astype(np.int64)
    out[big] = 2**63 - 1
    out[at_least[1] == 0] = 0
    return out


def _masked(values: np.ndarray, keep: np.ndarray, typ: pa.DataType) -> pa.Array:
    return pa.array(values, typ, mask=~keep)


# ------------------------------------------------------------------- kernels
class _Count(Kernel):
    def __call__(self, b):
        return pa.array(b.n, pa.int64())


class _Sum(Kernel):
    def result_type(self, payload, int_values):
        return pa.int64() if int_values else pa.float64()

    def __call__(self, b):
        lo, hi = b.lo, b.hi
        if b.int_values:
            # int64 prefix sums wrap, so a difference is the exact sum modulo 2^64; a long-double
            # estimate picks the multiple of 2^64 and so tells an int64 total from an overflow
            x = b.numpy("x", np.int64)
            pre = np.zeros(b.m + 1, dtype=np.int64)
            with np.errstate(over="ignore"):
                np.cumsum(x, out=pre[1:])
                s = pre[hi] - pre[lo]
            pref = np.zeros(b.m + 1, dtype=np.longdouble)
            np.cumsum(x.astype(np.longdouble), out=pref[1:])
            est = pref[hi] - pref[lo]
            wraps = np.rint((est - s.astype(np.longdouble)) / np.longdouble(2.0**64))
            return _masked(s, wraps == 0, pa.int64())
        return pa.array(range_sums(b.numpy("x", np.float64), lo, hi), pa.float64())


class _Average(Kernel):
    def result_type(self, payload, int_values):
        return pa.float64()

    def __call__(self, b):
        # int values summed as doubles, as Spark's avg and the store's Average
        x = b.numpy("x", np.int64 if b.int_values else np.float64).astype(np.float64)
        n = b.n
        return _masked(range_sums(x, b.lo, b.hi) / np.maximum(n, 1), n > 0, pa.float64())


class _Extremum(Kernel):
    largest = False

    def result_type(self, payload, int_values):
        return payload

    def __call__(self, b):
        p = b.column("p")
        m, lo, hi = b.m, b.lo, b.hi
        has = b.n > 0
        ranks = _dense_ranks(p)
        if self.largest:
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


class _Min(_Extremum):
    pass


class _Max(_Extremum):
    largest = True


class _Pick(Kernel):
    """``First*`` (write ``lo``) / ``Latest*`` (write ``hi - 1``): its values, or its time."""

    latest = False
    time_only = False

    def result_type(self, payload, int_values):
        return pa.int64() if self.time_only else payload

    def __call__(self, b):
        has = b.n > 0
        pick = np.where(has, b.hi - 1 if self.latest else b.lo, 0)
        if self.time_only:
            m = b.m
            return _masked(b.w_t[np.minimum(pick, max(m - 1, 0))] if m else np.zeros(len(b.lo), np.int64), has,
                           pa.int64())
        return _pick(b.column("p"), pick, has)


class _First(_Pick):
    pass


class _FirstTime(_Pick):
    time_only = True


class _Latest(_Pick):
    latest = True


class _LatestTime(_Pick):
    latest, time_only = True, True


class _Sequence(Kernel):
    def result_type(self, payload, int_values):
        return pa.list_(payload)

    def __call__(self, b):
        p = b.column("p")
        offsets, idx = _ranges_index(b.lo, b.hi)
        return pa.ListArray.from_arrays(pa.array(offsets.astype(np.int32)), p.take(pa.array(idx)))


class _Set(_Sequence):
    def __call__(self, b):
        p = b.column("p")
        m, lo, hi = b.m, b.lo, b.hi
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


class _CountUnique(Kernel):
    def __call__(self, b):
        vid = pc.dictionary_encode(b.column("u")).indices.to_numpy(zero_copy_only=False).astype(np.int64)
        prev = _previous(b.w_kid, vid)
        return pa.array(count_distinct(prev, b.lo, b.hi), pa.int64())


class _HyperLogLog(Kernel):
    def __call__(self, b):
        return pa.array(_hll(b.w_kid, b.numpy("slot", np.int64), b.numpy("rho", np.int64), b.lo, b.hi), pa.int64())


class _Decayed(Kernel):
    """``Decayed*`` by the epoch recurrence (module docstring)."""

    windowless = True
    counts = False  # DecayedCount: every write weighs 1
    average = False  # DecayedAverage: dv / dw at the latest write

    def result_type(self, payload, int_values):
        return pa.float64()

    def __call__(self, b):
        m, w_t, w_kid, lo, hi = b.m, b.w_t, b.w_kid, b.lo, b.hi
        W = float(b.window_ms)
        E = EPOCH_WINDOWS * b.window_ms
        has = b.n > 0
        if m == 0:
            return pa.nulls(len(lo), pa.float64())
        v = np.ones(m) if self.counts else b.numpy("x", np.float64)
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
        if self.average:
            with np.errstate(invalid="ignore", divide="ignore"):
                a = dv[last_w] / dw[last_w]
            return _masked(a, has & (dw[last_w] > 0), pa.float64())
        # a read without writes (``has`` false) points at write 0, which may lie after it (another key's): its
        # exponent could overflow, so it decays by nothing and is masked below
        f = np.exp(-np.where(has, b.r_t - w_t[last_w], 0).astype(np.float64) / W)
        a = (dw[last_w] if self.counts else dv[last_w]) * f
        return _masked(a, has, pa.float64())


class _DecayedCount(_Decayed):
    counts = True


class _DecayedSum(_Decayed):
    pass


class _DecayedAverage(_Decayed):
    average = True


#: The Arrow target, by function name (``compiler.algebra.registry.REGISTRY``'s names).
KERNELS: dict[str, Kernel] = {
    "Count": _Count(), "Sum": _Sum(), "Average": _Average(), "Min": _Min(), "Max": _Max(),
    "First": _First(), "FirstTime": _FirstTime(), "Latest": _Latest(), "LatestTime": _LatestTime(),
    "Sequence": _Sequence(), "Set": _Set(), "CountUnique": _CountUnique(), "HyperLogLog": _HyperLogLog(),
    "DecayedCount": _DecayedCount(), "DecayedSum": _DecayedSum(), "DecayedAverage": _DecayedAverage(),
}
