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

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from compiler.algebra.arrow import KERNELS, Batch

__all__ = ["SweepPart", "SweepSpec", "sweep_stage", "sweep_table", "sweep_union"]

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
    kernel = KERNELS.get(spec.function)
    if kernel is None:
        raise ValueError(f"aggregate function {spec.function} has no sweep")
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
    a_type = kernel.result_type(table.schema.field("p").type if "p" in table.column_names else None,
                                spec.int_values)

    valid = kid_all >= 0
    rows = np.flatnonzero(valid)
    # merged order: key, time, arrival, then write before read when inclusive
    tie = role[rows] if spec.inclusive else (1 - role[rows])
    order = rows[np.lexsort((tie, seq_all[rows], t_all[rows], kid_all[rows]))]
    o_write = role[order] == 0
    w_rows = order[o_write]  # table rows of the writes, in write order
    before = np.cumsum(o_write) - o_write  # writes before each merged position
    r_pos = np.flatnonzero(~o_write)
    r_rows = order[r_pos]  # table rows of the keyed reads, in merged order
    hi = before[r_pos].astype(np.int64)
    r_kid = kid_all[r_rows]
    r_t = t_all[r_rows]
    w_kid = kid_all[w_rows]
    w_t = t_all[w_rows]

    decayed = kernel.windowless
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
    lo_all = lo  # before limit n
    if spec.limit is not None:
        lo = np.maximum(lo, hi - spec.limit)
    n = hi - lo
    late = _arrived_before(seq_all[w_rows], w_kid, seq_all[r_rows], hi, key_start)

    # results in merged-read order, then scattered to the table's read order
    r_index = np.searchsorted(read_rows, r_rows)
    if (n > 0).any():
        a_vals = kernel(Batch(table, w_rows, w_kid, w_t, lo, hi, r_t, spec.window_ms, spec.int_values))
    else:
        a_vals = pa.nulls(len(lo), a_type)
    if len(late):
        a_vals, n = _recount(kernel, table, spec, a_vals, n, late, lo_all, hi, seq_all[w_rows], seq_all[r_rows],
                             w_rows, w_t, r_t, a_type)
    n_out[r_index] = n
    a_full = _scatter(a_vals, r_index, len(read_rows), a_type)
    if decayed:
        n_out[r_index] = (n > 0).astype(np.int64)
    return pa.table({"r_seq": pa.array(r_seq_out, pa.int64()), "a": a_full, "n": pa.array(n_out, pa.int64())})


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
    from pyspark.sql.pandas.types import from_arrow_type, to_arrow_type

    from compiler.algebra.spark import SPARK

    form = SPARK[function]
    vals = [F.col(f"v{i}") for i in range(len(value_types))]
    int_values = bool(value_types) and value_types[0] == "int"
    payload = form.sweep_columns(value_types, names, vals)
    probe = writes.select(*[c.alias(k) for k, c in payload.items()]).schema  # analysis only
    cols = {k: f"{k}_{_type_tag(probe[k].dataType)}" for k in payload}
    w = writes.select(F.lit(g).alias("g"), F.col("w_rk").alias("rk"), "t", "seq", F.lit(0).cast("byte").alias("role"),
                      F.lit(None).cast("long").alias("ra"), *[c.alias(cols[k]) for k, c in payload.items()])
    typed = {f.name: f.dataType for f in w.schema.fields}
    r = reads.select(F.lit(g).alias("g"), F.col("r_rk").alias("rk"), F.col("r_t").alias("t"),
                     F.col("r_seq").alias("seq"), F.lit(1).cast("byte").alias("role"),
                     F.col("r_a").cast("long").alias("ra"),
                     *[F.lit(None).cast(typed[cols[k]]).alias(cols[k]) for k in payload])
    p_type = to_arrow_type(typed[cols["p"]]) if "p" in cols else None
    a_type = from_arrow_type(KERNELS[function].result_type(p_type, int_values))
    spec = SweepSpec(function, int(window_ms), int(resolution_ms), limit, inclusive, int_values)
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
