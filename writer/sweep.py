"""Point-in-time reads as one sort and one vectorised sweep per group of keys (SPEC §2.4, §3.2, §3.3, §5.8).

The shape of Chronon's UnionJoin (CHIP-11): the reads and writes of the
aggregates whose states have the same key types (a *key group*) are one
frame of rows, one per (event, key value), each carrying every aggregate's
payload and two mask bits per aggregate (the row is a write of it, a read of
it); the frame is shuffled once by key into buckets
(``repartition(buckets, k).mapInArrow``), and each bucket -- many keys, or one hot
key -- is sorted once by (key, time, arrival) and swept once per aggregate
with numpy over its masked rows (:func:`sweep_group`). Nothing is joined per
read, nothing is per row in Python; every function is ``O(n log n)`` in the
rows of the bucket, whatever the key skew, and an event that reads and
writes several aggregates of one key moves as one row, not one per
(aggregate, role).

The rule (``writer.pointintime``'s module docstring, SPEC §3.2/§3.3): in the
merged order ``(key, time, arrival)`` -- a reading event's own write placed
just before its read when the aggregate is inclusive, just after when not --
the writes a read at ``t`` can count are the writes of its key before it,
from the first one at or after ``lo = (T(t - W) + 1) * r`` (raised to
``(T(a) + 1) * r`` by ``after a``). In write-index space that is one range
``[lo, hi)`` per read; ``limit n`` raises ``lo`` to ``hi - n``. Then the function's kernel
(``compiler.algebra.arrow.KERNELS``, the Arrow target of the algebra
registry) computes the aggregate of every range at once with numpy.

Arrival order that is not time order (SPEC §3.3): a read counts the writes
of its key with time in ``[lo, t]`` *and* an arrival (``seq``, the input's
file order) before its own. In (key, time, arrival) order that is the range
``[lo, hi)`` less the writes in it that arrived later (late events). Reads
that arrived before a write of their key with an earlier time are found in
``O(m)`` (a running maximum of arrival per key, :func:`_arrived_before`) and
recomputed over the writes of their range that arrived before them, each in
a segment of its own (:func:`_recount`); the others keep the sweep's value.
The extra cost is the range length of those reads only (nothing for events
in time order); a merge-sort tree over arrival would make it ``O(log^2 m)``
per read if heavily disordered inputs need it.

Tables:

* :func:`sweep_table` (one aggregate's bucket, the unit the tests hold to a
  brute-force oracle): in ``rk`` (string, null for a read with a null key
  component), ``t`` (long ms), ``seq`` (long arrival), ``role`` (byte: 0
  write, 1 read), ``ra`` (long ``after`` time or null), and per function
  ``x`` (numeric value), ``p`` (payload: the value or a struct of values),
  ``u`` (the encoded value tuple), ``slot``/``rho`` (HyperLogLog coupon);
  out ``r_seq`` (long), ``a`` (the aggregate before the empty-window rule),
  ``n`` (long: counted writes; ``-1`` for a null key);
* :func:`sweep_group` (a key group's bucket): in ``k``, ``t``, ``seq``,
  ``e``, mask words ``_m0..`` (:func:`mask_bits`) and the parts' payload and
  ``after`` columns; out ``r_seq``, ``e`` and ``n<i>``/``a<i>`` per part,
  one row per read row.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compiler.algebra.arrow import KERNELS, Batch

__all__ = ["GroupPart", "PARTS_PER_WORD", "SweepSpec", "mask_bits", "sweep_group", "sweep_table"]

#: Rows per Arrow batch handed back to Spark by a bucket's sweep.
_OUT_BATCH_ROWS = 65_536

@dataclass(frozen=True)
class SweepSpec:
    """What one sweep computes.

    Attributes:
        function: the aggregate function (SPEC §2.4 table).
        window_ms: window ``W`` in ms (the decay constant of ``Decayed*``).
        resolution_ms: resolution ``r`` in ms (SPEC §3.2).
        limit: ``limit n`` or None.
        inclusive: whether a read counts its own event's write (SPEC §3.3).
        int_values: the first value type is ``int`` (``Sum``: exact int64 sums).
    """

    function: str
    window_ms: int
    resolution_ms: int
    limit: int | None
    inclusive: bool
    int_values: bool = False


# ---------------------------------------------------------------------- sweep
@dataclass(frozen=True)
class _Order:
    """The rows of one bucket in ``(key, time, arrival)`` order, shared by every aggregate swept in it.

    Attributes:
        kid: int64 key number per row (``-1`` for a null key).
        t, seq: int64 time (ms) and arrival per row.
        order: int64 rows with a key, sorted by ``(kid, t, seq)`` (stable).
        grank: int64 per row: the dense rank of its ``(kid, t, seq)`` in
            ``order`` (``-1`` for a null key): the rows of one event that
            share a key value share a rank.
        tmin, span: the sort key ``kid * span + (t - tmin)`` of a write.
        keys, ranks: the number of key numbers (``max(kid) + 1``) and of ranks.
    """

    kid: np.ndarray
    t: np.ndarray
    seq: np.ndarray
    order: np.ndarray
    grank: np.ndarray
    tmin: int
    span: int
    keys: int
    ranks: int


def _order(kid: np.ndarray, t: np.ndarray, seq: np.ndarray) -> _Order:
    """Sort a bucket's keyed rows once by ``(key, time, arrival)`` (:class:`_Order`).

    Raises:
        ValueError: the keys times the time span do not fit the int64 sort key.
    """
    rows = np.flatnonzero(kid >= 0)
    tmin = int(t[rows].min()) if len(rows) else 0
    tmax = int(t[rows].max()) if len(rows) else 0
    span = tmax - tmin + 2
    nkeys = int(kid.max()) + 2 if len(kid) else 1
    if span * nkeys >= (1 << 62):
        raise ValueError(f"bucket too wide for the sweep's sort key ({nkeys} keys over {span} ms)")
    order = rows[np.lexsort((seq[rows], t[rows], kid[rows]))]
    grank = np.full(len(kid), -1, dtype=np.int64)
    ranks = 0
    if len(order):
        k, tt, s = kid[order], t[order], seq[order]
        new = np.ones(len(order), dtype=np.int64)
        new[1:] = (k[1:] != k[:-1]) | (tt[1:] != tt[:-1]) | (s[1:] != s[:-1])
        ranked = np.cumsum(new) - 1
        grank[order] = ranked
        ranks = int(ranked[-1]) + 1
    return _Order(kid, t, seq, order, grank, tmin, span, max(int(kid.max()) + 1, 0) if len(kid) else 0, ranks)


def _sweep_rows(o: _Order, is_write: np.ndarray, is_read: np.ndarray, table: pa.Table, ra: pa.Array | None,
                spec: SweepSpec, a_type: pa.DataType) -> tuple[np.ndarray, pa.Array, np.ndarray]:
    """One aggregate's point-in-time values for the keyed reads of a bucket (module docstring).

    Args:
        o: the bucket's order (:func:`_order`).
        is_write, is_read: bool per row: the row is a write / a read of this
            aggregate (a row may be both: one event reading and writing one
            key value); rows with a null key are never swept.
        table: the bucket's payload columns by kernel name (``x``, ``p``,
            ``u``, ``slot``, ``rho``), one chunk each, indexed by row.
        ra: per row, the ``after`` time (long ms, null for none), or None.
        spec: what to compute.
        a_type: the Arrow type of the aggregate.

    Returns:
        ``(r_rows, a, n)``: the keyed read rows (in ``(key, time, arrival)``
        order), the aggregate of each (``a_type``, before the empty-window
        rule) and its counted writes (int64; for ``Decayed*`` 1 if any).

    Raises:
        ValueError: a function without a sweep.
    """
    kernel = KERNELS.get(spec.function)
    if kernel is None:
        raise ValueError(f"aggregate function {spec.function} has no sweep")
    w_rows = o.order[is_write[o.order]]  # table rows of the writes, in write order
    r_rows = o.order[is_read[o.order]]  # keyed reads, in (key, time, arrival) order
    # merged order (SPEC §3.3): a reading event's own write just before its read when inclusive, after when not
    # (in O(n) by counting: the writes of earlier (key, time, arrival) ranks, plus those of its own rank -- its
    # own event's write -- when inclusive)
    r_rank = o.grank[r_rows]
    per_rank = np.bincount(o.grank[w_rows], minlength=o.ranks)
    hi = (np.cumsum(per_rank) - per_rank)[r_rank] + (per_rank[r_rank] if spec.inclusive else 0)
    r_kid, r_t, r_seq = o.kid[r_rows], o.t[r_rows], o.seq[r_rows]
    w_kid, w_t, w_seq = o.kid[w_rows], o.t[w_rows], o.seq[w_rows]
    span, tmin = o.span, o.tmin

    decayed = kernel.windowless
    # first write of the read's key (key_start: the writes of smaller keys) and first one inside the window (lo)
    per_key = np.bincount(w_kid, minlength=o.keys)
    key_start = (np.cumsum(per_key) - per_key)[r_kid]
    w_comp = w_kid * span + (w_t - tmin)
    if decayed:
        lo = key_start
    else:
        W, r = spec.window_ms, spec.resolution_ms
        lo_t = (np.floor_divide(r_t - W, r) + 1) * r
        if ra is not None:
            ra_col = ra.take(pa.array(r_rows))
            has_a = ra_col.is_valid().to_numpy(zero_copy_only=False)
            if has_a.any():
                ra_v = ra_col.fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
                lo_a = (np.floor_divide(ra_v, r) + 1) * r
                lo_t = np.where(has_a, np.maximum(lo_t, lo_a), lo_t)
        rel = np.clip(lo_t - tmin, 0, span - 1)
        lo = np.searchsorted(w_comp, r_kid * span + rel, "left")
    lo = np.minimum(lo, hi)
    lo_all = lo  # before limit n
    if spec.limit is not None:
        lo = np.maximum(lo, hi - spec.limit)
    n = hi - lo
    late = _arrived_before(w_seq, w_kid, r_seq, hi, key_start)
    if (n > 0).any():
        a_vals = kernel(Batch(table, w_rows, w_kid, w_t, lo, hi, r_t, spec.window_ms, spec.int_values))
    else:
        a_vals = pa.nulls(len(lo), a_type)
    if len(late):
        a_vals, n = _recount(kernel, table, spec, a_vals, n, late, lo_all, hi, w_seq, r_seq, w_rows, w_t, r_t,
                             a_type)
    if decayed:
        n = (n > 0).astype(np.int64)
    return r_rows, a_vals.cast(a_type), n


def sweep_table(table: pa.Table, spec: SweepSpec) -> pa.Table:
    """The point-in-time aggregate of every read in one bucket of one aggregate (module docstring).

    Args:
        table: the bucket's reads and writes (columns in the module docstring).
        spec: what to compute.

    Returns:
        ``r_seq`` (int64), ``a`` (typed per function: int64 for counts and
        times, float64 for averages and decayed values, the payload's type
        for picks, ``Min``/``Max``, lists for ``Sequence``/``Set``), ``n``
        (int64, ``-1`` for a null key), one row per read, in table order.

    Raises:
        ValueError: an unknown function, or a bucket whose keys and time span
            do not fit the int64 sort key.

    Source: SPEC §3.2, §3.3 (:func:`_sweep_rows`; :func:`sweep_group` sweeps
    several aggregates' rows the same way).
    """
    kernel = KERNELS.get(spec.function)
    if kernel is None:
        raise ValueError(f"aggregate function {spec.function} has no sweep")
    table = table.combine_chunks()
    role = table.column("role").to_numpy(zero_copy_only=False).astype(np.int8)
    rk = table.column("rk").combine_chunks() if table.num_rows else pa.array([], pa.string())
    kid = pc.dictionary_encode(rk).indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    o = _order(kid, table.column("t").to_numpy(zero_copy_only=False).astype(np.int64),
               table.column("seq").to_numpy(zero_copy_only=False).astype(np.int64))
    a_type = kernel.result_type(table.schema.field("p").type if "p" in table.column_names else None,
                                spec.int_values)
    is_read = role == 1
    read_rows = np.flatnonzero(is_read)
    ra = table.column("ra").combine_chunks() if "ra" in table.column_names else None
    r_rows, a_vals, n = _sweep_rows(o, role == 0, is_read, table, ra, spec, a_type)
    r_index = np.searchsorted(read_rows, r_rows)
    n_out = np.full(len(read_rows), -1, dtype=np.int64)
    n_out[r_index] = n
    a_full = _scatter(a_vals, r_index, len(read_rows), a_type)
    return pa.table({"r_seq": pa.array(o.seq[read_rows], pa.int64()), "a": a_full,
                     "n": pa.array(n_out, pa.int64())})


def _arrived_before(w_seq: np.ndarray, w_kid: np.ndarray, r_seq: np.ndarray, hi: np.ndarray,
                    key_start: np.ndarray) -> np.ndarray:
    """Positions of the reads (merged order) that arrived before a write of their key with an earlier time.

    In (key, time, arrival) order a read's range ``[lo, hi)`` may hold writes
    that arrived after it (a larger ``seq``: late events, SPEC §3.3); a read
    can have one only if the largest arrival among its key's writes before
    ``hi`` is above its own. None when events arrive in time order.

    Args:
        w_seq, w_kid: arrival and key number of each write, in write order.
        r_seq: arrival of each keyed read, in merged order.
        hi, key_start: per read, the end of its range and its key's first write.

    Returns:
        int64 read positions (ascending).
    """
    if not len(w_seq) or not len(hi):
        return np.zeros(0, np.int64)
    big = int(w_seq.max()) - int(min(w_seq.min(), 0)) + 1
    base = w_kid * big
    # running maximum of arrival within each key (keys ascend, so key k's values exceed key k-1's)
    peak = np.maximum.accumulate(base + w_seq) - base
    has = hi > key_start
    last = np.where(has, hi - 1, 0)
    return np.flatnonzero(has & (peak[last] > r_seq))


def _recount(kernel, table: pa.Table, spec: SweepSpec, a_vals: pa.Array, n: np.ndarray, late: np.ndarray,
             lo_all: np.ndarray, hi: np.ndarray, w_seq: np.ndarray, r_seq: np.ndarray, w_rows: np.ndarray,
             w_t: np.ndarray, r_t: np.ndarray, a_type: pa.DataType) -> tuple[pa.Array, np.ndarray]:
    """Recompute the reads in ``late`` over the writes of their range that arrived before them (SPEC §3.3).

    A read counts the writes of ``[lo, hi)`` (time order, before ``limit n``)
    with an arrival at most its own (its own write included when inclusive),
    then the ``n`` latest of those. Each such read gets a segment of its own
    (a key number of its own) in one more :class:`Batch` for the kernel; the
    cost is the length of those reads' ranges (whole histories for
    ``Decayed*``), only for reads that arrived before a write with an
    earlier time.

    Returns:
        ``(a_vals, n)`` with the recounted reads replaced.
    """
    segs = []
    for i in late:
        j = np.arange(lo_all[i], hi[i], dtype=np.int64)
        keep = j[w_seq[j] <= r_seq[i]]
        if spec.limit is not None:
            keep = keep[len(keep) - spec.limit:] if len(keep) > spec.limit else keep
        segs.append(keep)
    lens = np.array([len(x) for x in segs], dtype=np.int64)
    g = np.concatenate(segs) if segs else np.zeros(0, np.int64)
    ends = np.cumsum(lens)
    starts = ends - lens
    n = n.copy()
    n[late] = lens
    if not lens.any():
        fixed = pa.nulls(len(late), a_type)
    else:
        sub = Batch(table, w_rows[g], np.repeat(np.arange(len(late), dtype=np.int64), lens), w_t[g], starts, ends,
                    r_t[late], spec.window_ms, spec.int_values)
        fixed = kernel(sub)
    pos = np.arange(len(a_vals), dtype=np.int64)
    pos[late] = len(a_vals) + np.arange(len(late), dtype=np.int64)
    both = pa.concat_arrays([a_vals.cast(a_type), fixed.cast(a_type)])
    return both.take(pa.array(pos)), n


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


# ---------------------------------------------------------------------- Spark
#: Aggregates per mask word of a key group's rows: two bits each (write, read) in a signed long.
PARTS_PER_WORD = 31


def mask_bits(i: int) -> tuple[str, int, int]:
    """Where part ``i`` of a key group keeps its row masks (:func:`sweep_group`).

    Args:
        i: the part's position in the group (``>= 0``).

    Returns:
        ``(column, write_bit, read_bit)``: the long mask column ``_m<w>`` and
        the values of the two bits (a row is a write of part ``i`` iff
        ``column & write_bit``, a read iff ``column & read_bit``).
    """
    j = i % PARTS_PER_WORD
    return f"_m{i // PARTS_PER_WORD}", 1 << (2 * j), 1 << (2 * j + 1)


@dataclass(frozen=True)
class GroupPart:
    """One aggregate of a key group (:func:`sweep_group`).

    Attributes:
        spec: what to compute.
        payload: its payload columns in the group's frame, as
            ``((kernel name, column), ..)`` (kernel names ``x``, ``p``,
            ``u``, ``slot``, ``rho``: ``compiler.algebra.spark.SparkAggregate.sweep_columns``);
            parts with the same payload share a column.
        after: the column holding its reads' ``after`` time (long ms, null
            for none), or None (no ``after``).
        a_type: the Spark type of its aggregate ``a`` (before the
            empty-window rule).
    """

    spec: SweepSpec
    payload: tuple[tuple[str, str], ...]
    after: str | None
    a_type: object


def sweep_group(frame, parts: list[GroupPart], buckets: int):
    """Point-in-time values of the aggregates of one key group: one shuffle, one sweep per key bucket.

    The shape of Chronon's UnionJoin (CHIP-11), with the rows shared by
    every aggregate whose state has the same key types: ``frame`` holds one
    row per (event, key value) -- an event whose reads and writes of the
    group's aggregates use several key expressions has one row per
    expression -- with every part's payload as columns and two bits per
    part (:func:`mask_bits`): the row is a write of the part (its ``where``
    and non-null rules met, SPEC §2.4), the row is a read of the part. The
    frame is shuffled once by key into ``buckets`` partitions
    (``repartition(buckets, k).mapInArrow``: every row of a key value in
    one partition, which is one bucket); each bucket is sorted once by
    ``(key, time, arrival)`` in numpy and each part is swept over its
    masked rows with the function's kernel (:func:`_sweep_rows`, SPEC §3.2,
    §3.3). No sort in Spark and one Python call per partition:
    ``groupBy(bucket).applyInArrow`` sorted every row by bucket first, and
    cost ~40% more per row on 1M rows.

    Args:
        frame: columns ``k`` (string: the encoded key tuple, null for a
            null key component, which only reads may have), ``t`` (long
            ms), ``seq`` (long arrival), ``e`` (int: the row's event type,
            carried to the output), the mask words ``_m0..`` (long) and the
            parts' payload and ``after`` columns.
        parts: the group's aggregates; part ``i`` uses :func:`mask_bits` ``(i)``.
        buckets: number of key buckets (partitions, one Python call each).

    Returns:
        A DataFrame ``r_seq`` (long), ``e`` (int), and per part ``i``
        ``n<i>`` (long: counted writes, ``-1`` for a null key, null where
        the row is not a read of part ``i``) and ``a<i>`` (``a_type``):
        one row per frame row that is a read of some part.

    Raises:
        ValueError: (in the tasks) a function without a sweep, or a bucket
            too wide for the sort key.
    """
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import to_arrow_type
    from pyspark.sql.types import IntegerType, LongType, StructField, StructType

    fields = [StructField("r_seq", LongType()), StructField("e", IntegerType())]
    for i, p in enumerate(parts):
        fields += [StructField(f"n{i}", LongType()), StructField(f"a{i}", p.a_type)]
    schema = StructType(fields)
    specs = [p.spec for p in parts]
    payloads = [p.payload for p in parts]
    afters = [p.after for p in parts]
    a_types = [to_arrow_type(p.a_type) for p in parts]

    def sweep_bucket(batches):
        batches = list(batches)
        if not batches:
            return
        out = _sweep_group_bucket(pa.Table.from_batches(batches), specs, payloads, afters, a_types)
        yield from out.to_batches(max_chunksize=_OUT_BATCH_ROWS)

    return frame.repartition(buckets, F.col("k")).mapInArrow(sweep_bucket, schema)


def _sweep_group_bucket(table: pa.Table, specs: list[SweepSpec], payloads, afters: list[str | None],
                        a_types: list[pa.DataType]) -> pa.Table:
    """One bucket of :func:`sweep_group`: one sort, each part swept over its masked rows; one row per read row."""
    table = table.combine_chunks()
    k = table.column("k").combine_chunks() if table.num_rows else pa.array([], pa.string())
    kid = pc.dictionary_encode(k).indices.fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64)
    o = _order(kid, table.column("t").to_numpy(zero_copy_only=False).astype(np.int64),
               table.column("seq").to_numpy(zero_copy_only=False).astype(np.int64))
    words: dict[str, np.ndarray] = {}
    any_read = np.zeros(table.num_rows, dtype=bool)
    bits = []
    for i in range(len(specs)):
        col, wb, rb = mask_bits(i)
        if col not in words:
            words[col] = table.column(col).fill_null(0).to_numpy(zero_copy_only=False).astype(np.int64)
        is_read = (words[col] & rb) != 0
        any_read |= is_read
        bits.append(((words[col] & wb) != 0, is_read))
    out_rows = np.flatnonzero(any_read)
    size = len(out_rows)
    out_pos = np.full(table.num_rows, -1, dtype=np.int64)  # row -> its output position
    out_pos[out_rows] = np.arange(size, dtype=np.int64)
    out = {"r_seq": pa.array(o.seq[out_rows], pa.int64()),
           "e": table.column("e").take(pa.array(out_rows)).cast(pa.int32())}
    for i, spec in enumerate(specs):
        is_write, is_read = bits[i]
        cols = {name: table.column(col) for name, col in payloads[i]}
        part = pa.table(cols)
        ra = table.column(afters[i]) if afters[i] is not None else None
        r_rows, a_vals, n = _sweep_rows(o, is_write, is_read, part, ra, spec, a_types[i])
        # every read of the part (null keys: n = -1, no aggregate); null where the row is no read of it
        n_full = np.full(size, -1, dtype=np.int64)
        index = out_pos[r_rows]
        n_full[index] = n
        out[f"n{i}"] = pa.array(n_full, pa.int64(), mask=~is_read[out_rows])
        out[f"a{i}"] = _scatter(a_vals, index, size, a_types[i])
    # in batches: one Arrow batch of a hot key's millions of rows would be one JVM allocation
    result = pa.table(out)
    return pa.Table.from_batches(result.to_batches(max_chunksize=_OUT_BATCH_ROWS), schema=result.schema)
