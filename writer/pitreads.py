"""Linear-cost point-in-time reads of one aggregate, with Spark built-ins (SPEC §3.2, §3.3, §5.8).

``writer.pointintime`` states *what* value an aggregate had for each reading
event; this module computes it without joining each read to every write of
its key within the window (which is quadratic in the events per key per
window, and a global aggregate is one key). Three strategies, by function:

* **Tiles** (``Count``, ``Sum``, ``Average``, ``Min``, ``Max``,
  ``CountUnique``, ``HyperLogLog``, ``First``, ``FirstTime``; no ``limit``):
  the counted writes of a read at ``t`` are those of the complete resolution
  tiles ``[lo, T(t))`` plus those of the read's own tile ``T(t)`` that come
  before it (by time, then arrival; itself too when inclusive), where ``lo``
  is ``T(t - W) + 1`` raised to ``T(a) + 1`` by ``after a``. Partial
  aggregates are computed once per (key, tile) at every level of a ladder of
  tile sizes (the store's, ``compiler.algebra.windows.levels_s``, extended
  beyond one day by factors of 8), each read is exploded into the aligned
  tiles covering ``[lo, T(t))`` exactly (:func:`cover_tiles`: at most a few
  per level), joined to them, and the read's own tile is joined to the raw
  writes of that tile only. The partials are merged per read as the online
  path merges its tiles (Chronon's init/update/merge/finalize, windowing
  apart). Work: ``O(reads x tiles per cover + writes x levels)``, plus the
  writes of one resolution tile per read.
* **Ranks** (any ``limit``, ``Sequence``, ``Set``, ``Latest``,
  ``LatestTime``): the counted writes of a read are a suffix of its key's
  writes in (time, arrival) order (every filter bounds them from below), so
  the ``n`` latest counted writes are the ``n`` latest writes before the read
  that pass the window and ``after`` bounds. One window function numbers each
  key's writes and counts, for each read, the writes before it; the read is
  then joined to those ``n`` writes by number (``Latest`` needs one).
* **Recurrence** (``Decayed*``): the store keeps, per key, the decayed sums
  ``dv``, ``dw`` weighed to the latest write ``dt`` and reads
  ``dv * exp(-(t - dt) / W)`` (``compiler.algebra.ops.DecayedOp``). The same
  sums at each write are prefix sums of ``v * exp((s - A) / W)`` around an
  anchor ``A``, taken per epoch of :data:`EPOCH_WINDOWS` windows so that no
  exponent exceeds ``EPOCH_WINDOWS`` (doubles reach ``e^709``); the previous
  epoch's total is carried in, and older epochs weigh below
  ``e^-EPOCH_WINDOWS`` (about ``1e-130``) relative to it and are left out. A
  read takes the latest write at or before it (a window function) and
  decays it to ``t``, exactly as the store does.

The frames exchanged with ``writer.pointintime``:

* reads: ``r_seq`` (arrival), ``r_t`` (ms), ``r_rk`` (encoded read key, null
  for a null key component), ``r_a`` (``after`` time in ms or null);
* writes: ``w_rk``, ``t``, ``seq``, ``v0..`` (the counted writes of the
  state, ``writer.tiles.writes_of_state``);
* results: ``r_seq``, ``r_rk``, ``a`` (the aggregate, before the empty-window
  and null-key rules), ``n`` (number of counted writes).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from compiler.algebra.windows import levels_s

__all__ = [
    "EPOCH_WINDOWS", "TILED_FUNCTIONS", "cover_tiles", "ladder_ms", "ranked_join", "tiled_values",
    "decayed_values", "window_start",
]

#: Functions whose point-in-time values :func:`tiled_values` computes (without ``limit``).
TILED_FUNCTIONS = frozenset(
    {"Count", "Sum", "Average", "Min", "Max", "CountUnique", "HyperLogLog", "First", "FirstTime"}
)

#: Length, in windows, of the epochs the decayed prefix sums are anchored on.
EPOCH_WINDOWS = 300

_DAY_MS = 86_400_000


def _long(x: int) -> Column:
    return F.lit(int(x)).cast("long")


def _floor_mult(col: Column, z: int) -> Column:
    """``floor(col / z) * z`` on longs, exact for negative times too."""
    return col - F.pmod(col, _long(z))


def _ceil_mult(col: Column, z: int) -> Column:
    """``ceil(col / z) * z`` on longs."""
    return col + F.pmod(-col, _long(z))


def _div(col: Column, z: int) -> Column:
    """``col / z`` for an exact multiple ``col`` of ``z`` (long)."""
    return F.call_function("div", col, _long(z))


def ladder_ms(window_s: int) -> tuple[int, ...]:
    """Tile sizes (ms, finest first, each dividing the next) used to cover windows of ``window_s``.

    The store's sizes (``levels_s``), then 8, 64, 512, ... days while no
    larger than the window, so a cover has a bounded number of tiles for any
    window (the store stops at one day: a 1-year window would take ~365).

    >>> ladder_ms(600)
    (1000, 5000, 15000, 60000, 300000)
    >>> ladder_ms(100 * 86400)[-3:]
    (86400000, 691200000, 5529600000)
    """
    sizes = [z * 1000 for z in levels_s(window_s)]
    if sizes[-1] == _DAY_MS:
        z = _DAY_MS * 8
        while z <= window_s * 1000:
            sizes.append(z)
            z *= 8
    return tuple(sizes)


def window_start(r_t: Column, r_a: Column, window_ms: int, r_ms: int) -> Column:
    """First ms of the first counted resolution tile of a read (SPEC §3.2).

    ``(T(t - W) + 1) * r``, raised to ``(T(a) + 1) * r`` when ``a`` is not
    null (``T(x) = floor(x / r)``). A write at ``s`` passes the window and
    ``after`` bounds iff ``s >=`` this.
    """
    lo = _floor_mult(r_t - _long(window_ms), r_ms) + _long(r_ms)
    return F.when(r_a.isNull(), lo).otherwise(F.greatest(lo, _floor_mult(r_a, r_ms) + _long(r_ms)))


def cover_tiles(df: DataFrame, lo: str, hi: str, sizes_ms: tuple[int, ...]) -> DataFrame:
    """Explode each row of ``df`` into the aligned tiles covering ``[lo, hi)`` exactly.

    ``lo`` and ``hi`` (long columns of ``df``, epoch ms) are multiples of
    ``sizes_ms[0]``. With ``a_j`` / ``b_j`` the first / last multiple of size
    ``z_j`` inside ``[lo, hi)``, level ``j`` contributes the ranges
    ``[a_j, a_{j+1})`` and ``[b_{j+1}, b_j)`` when a whole tile of level
    ``j + 1`` fits, else ``[a_j, b_j)`` when one of level ``j`` fits: fine
    tiles at the edges, coarse ones in the middle, like
    ``compiler.algebra.windows.cover``. The bounds are computed as columns
    first and the ranges exploded in two steps, which keeps the generated
    code small (one nested expression per level overflows the JVM's 64 KB
    method limit).

    Args:
        df: any frame with the ``lo`` and ``hi`` columns.
        lo, hi: column names.
        sizes_ms: tile sizes, finest first, each dividing the next.

    Returns:
        ``df``'s columns (without ``lo``/``hi``) plus ``z`` (tile size, ms)
        and ``i`` (tile index: the tile spans ``[i * z, (i + 1) * z)``), one
        row per tile; a row with an empty range yields none.
    """
    keep = [c for c in df.columns if c not in (lo, hi)]
    m = len(sizes_ms)
    df = df.select(*keep, *[_ceil_mult(F.col(lo), z).alias(f"_a{j}") for j, z in enumerate(sizes_ms)],
                   *[_floor_mult(F.col(hi), z).alias(f"_b{j}") for j, z in enumerate(sizes_ms)])
    a = [F.col(f"_a{j}") for j in range(m)]
    b = [F.col(f"_b{j}") for j in range(m)]
    ranges = []
    for j, z in enumerate(sizes_ms):
        zl = _long(z)
        if j + 1 == m:
            ranges.append(F.struct(zl.alias("z"), a[j].alias("x"), b[j].alias("y")))
            continue
        fits_next = a[j + 1] < b[j + 1]
        ranges.append(F.struct(zl.alias("z"), a[j].alias("x"), F.when(fits_next, a[j + 1]).otherwise(b[j]).alias("y")))
        ranges.append(F.struct(zl.alias("z"), F.when(fits_next, b[j + 1]).otherwise(b[j]).alias("x"), b[j].alias("y")))
    df = df.select(*keep, F.explode(F.array(*ranges)).alias("_r")).where(F.col("_r.x") < F.col("_r.y"))
    z = F.col("_r.z")
    idx = F.sequence(F.call_function("div", F.col("_r.x"), z), F.call_function("div", F.col("_r.y"), z) - _long(1))
    return df.select(*keep, z.alias("z"), F.explode(idx).alias("i"))


def _before_read(inclusive: bool) -> Column:
    """Join condition: write (``t``, ``seq``) comes before read (``r_t``, ``r_seq``) (SPEC §3.3)."""
    cond = (F.col("t") < F.col("r_t")) | ((F.col("t") == F.col("r_t")) & (F.col("seq") < F.col("r_seq")))
    if inclusive:
        cond = cond | (F.col("seq") == F.col("r_seq"))
    return cond


def _filler(reads: DataFrame, writes: DataFrame, value_cols: list[str]) -> DataFrame:
    """One all-null write row per read (every read then has a group, counted writes or not)."""
    types = dict(writes.dtypes)
    return reads.select(
        "r_seq", "r_rk", "r_t", F.lit(None).cast("long").alias("t"), F.lit(None).cast("long").alias("seq"),
        *[F.lit(None).cast(types[c]).alias(c) for c in value_cols],
    )


def _running(reads: DataFrame, writes: DataFrame, inclusive: bool, carry: list[str]) -> DataFrame:
    """For each read with a key: the count of its key's writes before it and the latest one's columns.

    One window function over reads and writes of each key in (time,
    arrival) order; a read sorts after its own write when inclusive, before
    it otherwise (SPEC §3.3).

    Args:
        reads: ``r_seq``, ``r_t``, ``r_rk``.
        writes: ``w_rk``, ``t``, ``seq`` and the ``carry`` columns.
        inclusive: whether a read counts its own write.
        carry: write columns whose latest value before each read is returned.

    Returns:
        ``r_seq``, ``c`` (writes before the read, long), and each carry
        column (null when ``c`` is 0).
    """
    types = dict(writes.dtypes)
    kind = 1 if inclusive else -1
    u = reads.where(F.col("r_rk").isNotNull()).select(
        F.col("r_rk").alias("_k"), F.col("r_t").alias("_t"), F.col("r_seq").alias("_s"), F.lit(kind).alias("_o"),
        *[F.lit(None).cast(types[c]).alias(c) for c in carry],
    ).unionByName(writes.select(
        F.col("w_rk").alias("_k"), F.col("t").alias("_t"), F.col("seq").alias("_s"), F.lit(0).alias("_o"),
        *carry,
    ))
    w = Window.partitionBy("_k").orderBy("_t", "_s", "_o").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    u = u.select(
        "_s", "_o",
        F.count(F.when(F.col("_o") == F.lit(0), F.lit(1))).over(w).alias("c"),
        *[F.last(F.col(c), ignorenulls=True).over(w).alias(c) for c in carry],
    )
    return u.where(F.col("_o") != F.lit(0)).select(F.col("_s").alias("r_seq"), "c", *carry)


def ranked_join(reads: DataFrame, writes: DataFrame, n: int, inclusive: bool, window_ms: int, r_ms: int,
                value_cols: list[str]) -> DataFrame:
    """Each read with the ``n`` latest writes it counts (the *ranks* strategy, module docstring).

    Args:
        reads: ``r_seq``, ``r_t``, ``r_rk``, ``r_a``.
        writes: ``w_rk``, ``t``, ``seq``, ``value_cols``.
        n: how many latest counted writes to keep (``limit``; 1 for ``Latest``).
        inclusive: whether a read counts its own write.
        window_ms, r_ms: the window ``W`` and resolution ``r``.
        value_cols: the value columns ``v0..``.

    Returns:
        ``r_seq``, ``r_rk``, ``r_t``, ``t``, ``seq``, ``value_cols``: one row
        per counted write kept, plus one all-null write row per read.

    Source: SPEC §3.2 (``limit n`` keeps the ``n`` latest by time, then arrival).
    """
    numbered = writes.withColumn(
        "k", F.row_number().over(Window.partitionBy("w_rk").orderBy("t", "seq")).cast("long"))
    pos = _running(reads, writes, inclusive, [])
    lo_k = F.greatest(F.col("c") - _long(n - 1), _long(1))
    cand = (reads.join(pos.where(F.col("c") > F.lit(0)), "r_seq")
            .select("r_seq", "r_rk", "r_t", "r_a", F.explode(F.sequence(lo_k, F.col("c"))).alias("k")))
    lo = window_start(F.col("r_t"), F.col("r_a"), window_ms, r_ms)
    matched = (cand.join(numbered, (F.col("r_rk") == F.col("w_rk")) & (cand["k"] == numbered["k"]))
               .where(F.col("t") >= lo)
               .select("r_seq", "r_rk", "r_t", "t", "seq", *value_cols))
    return matched.unionByName(_filler(reads, writes, value_cols))


def tiled_values(reads: DataFrame, writes: DataFrame, fn: str, value_types: list[str], names: list[str],
                 inclusive: bool, window_s: int, r_ms: int) -> DataFrame:
    """Point-in-time values from tile partials (the *tiles* strategy, module docstring).

    Args:
        reads: ``r_seq``, ``r_t``, ``r_rk``, ``r_a``.
        writes: ``w_rk``, ``t``, ``seq``, ``v0..`` (typed per ``value_types``).
        fn: one of :data:`TILED_FUNCTIONS`.
        value_types, names: the state's value types and the value names.
        inclusive: whether a read counts its own write.
        window_s: the window ``W`` in seconds.
        r_ms: the resolution ``r`` in ms.

    Returns:
        ``r_seq``, ``r_rk``, ``a``, ``n`` (see the module docstring); ``a``
        of ``First`` is the payload (a struct for several values),
        ``HyperLogLog`` the rounded estimate.

    Raises:
        ValueError: ``fn`` is not in :data:`TILED_FUNCTIONS`.

    Source: SPEC §2.4 (functions), §3.2 (window rule), §3.3 (inclusive reads).
    """
    from writer.pointintime import hll_estimate_column
    from writer.tiles import encode_tuple_column, hll_coupon_columns

    if fn not in TILED_FUNCTIONS:
        raise ValueError(f"{fn} has no tiled point-in-time read")
    W = window_s * 1000
    sizes = ladder_ms(window_s)
    vals = [F.col(f"v{i}") for i in range(len(value_types))]
    order = F.struct(F.col("t").alias("t"), F.col("seq").alias("seq"))
    payload = vals[0] if len(vals) == 1 else F.struct(*[v.alias(nm) for v, nm in zip(vals, names)])

    # the partial of each raw write, in the columns the merge below reads
    if fn == "Count":
        part = [F.lit(1).cast("long").alias("p_n")]
    elif fn in ("Sum", "Average"):
        kind = "long" if fn == "Sum" and value_types[0] == "int" else "double"
        part = [F.lit(1).cast("long").alias("p_n"), vals[0].cast(kind).alias("p_s")]
    elif fn in ("Min", "Max"):
        part = [F.lit(1).cast("long").alias("p_n"), vals[0].alias("p_m")]
    elif fn in ("First", "FirstTime"):
        part = [F.lit(1).cast("long").alias("p_n"), order.alias("p_o"), payload.alias("p_p")]
    elif fn == "CountUnique":
        part = [F.lit(1).cast("long").alias("p_n"), encode_tuple_column(vals, value_types).alias("p_u")]
    else:  # HyperLogLog
        slot, rho = hll_coupon_columns(encode_tuple_column(vals, value_types))
        part = [F.lit(1).cast("long").alias("p_n"), slot.alias("p_slot"), rho.alias("p_rho")]
    raw = writes.select("w_rk", "t", "seq", *part)

    # tile partials at every level of the ladder
    levels = F.explode(F.array(*[F.struct(_long(z).alias("z"), F.call_function("div", _floor_mult(F.col("t"), z),
                                                                                   _long(z)).alias("i"))
                                 for z in sizes]))
    exploded = raw.select("*", levels.alias("_l")).select("*", F.col("_l.z").alias("z"), F.col("_l.i").alias("i"))
    g = ["w_rk", "z", "i"]
    if fn == "Count":
        tiles = exploded.groupBy(*g).agg(F.sum("p_n").alias("p_n"))
    elif fn in ("Sum", "Average"):
        s = F.try_sum("p_s") if dict(raw.dtypes)["p_s"] == "bigint" else F.sum("p_s")
        tiles = exploded.groupBy(*g).agg(F.sum("p_n").alias("p_n"), s.alias("p_s"))
    elif fn in ("Min", "Max"):
        m = F.min("p_m") if fn == "Min" else F.max("p_m")
        tiles = exploded.groupBy(*g).agg(F.sum("p_n").alias("p_n"), m.alias("p_m"))
    elif fn in ("First", "FirstTime"):
        tiles = exploded.groupBy(*g).agg(F.sum("p_n").alias("p_n"), F.min("p_o").alias("p_o"),
                                         F.min_by("p_p", "p_o").alias("p_p"))
    elif fn == "CountUnique":
        tiles = exploded.groupBy(*g, "p_u").agg(F.sum("p_n").alias("p_n"))
    else:
        tiles = exploded.groupBy(*g, "p_slot").agg(F.sum("p_n").alias("p_n"), F.max("p_rho").alias("p_rho"))
    pcols = [c for c in tiles.columns if c.startswith("p_")]

    # each read: the complete tiles before its own tile, and the writes of its own tile before it
    keyed = reads.where(F.col("r_rk").isNotNull())
    lo = window_start(F.col("r_t"), F.col("r_a"), W, r_ms)
    head = _floor_mult(F.col("r_t"), r_ms)
    cov = cover_tiles(keyed.select("r_seq", "r_rk", lo.alias("lo"), head.alias("hi")), "lo", "hi", sizes)
    from_tiles = cov.join(tiles, (F.col("r_rk") == F.col("w_rk")) & (cov["z"] == tiles["z"]) & (cov["i"] == tiles["i"]))
    from_tiles = from_tiles.select("r_seq", "r_rk", *pcols)
    heads = keyed.select("r_seq", "r_rk", "r_t", head.alias("h"), lo.alias("lo"))
    rawh = raw.withColumn("h", _floor_mult(F.col("t"), r_ms))
    from_head = (heads.join(rawh, (F.col("r_rk") == F.col("w_rk")) & (heads["h"] == rawh["h"]))
                 .where(_before_read(inclusive) & (F.col("t") >= F.col("lo")))
                 .select("r_seq", "r_rk", *pcols))
    types = dict(tiles.dtypes)
    filler = reads.select("r_seq", "r_rk", *[F.lit(None).cast(types[c]).alias(c) for c in pcols])
    parts = from_tiles.unionByName(from_head).unionByName(filler)

    grp = parts.groupBy("r_seq", "r_rk")
    n = F.coalesce(F.sum("p_n"), _long(0)).alias("n")
    if fn == "Count":
        return grp.agg(n.alias("a"), n)
    if fn == "Sum":
        s = F.try_sum("p_s") if types["p_s"] == "bigint" else F.sum("p_s")
        return grp.agg(s.alias("a"), n)
    if fn == "Average":
        return grp.agg((F.sum("p_s") / F.sum("p_n")).alias("a"), n)
    if fn in ("Min", "Max"):
        return grp.agg((F.min("p_m") if fn == "Min" else F.max("p_m")).alias("a"), n)
    if fn == "First":
        return grp.agg(F.min_by("p_p", "p_o").alias("a"), n)
    if fn == "FirstTime":
        return grp.agg(F.min("p_o").getField("t").alias("a"), n)
    if fn == "CountUnique":
        return grp.agg(F.count_distinct("p_u").alias("a"), n)
    regs = parts.groupBy("r_seq", "r_rk", "p_slot").agg(F.max("p_rho").alias("rho"), F.sum("p_n").alias("c"))
    g2 = regs.groupBy("r_seq", "r_rk").agg(F.collect_list("rho").alias("rhos"),
                                           F.coalesce(F.sum("c"), _long(0)).alias("n"))
    return g2.select("r_seq", "r_rk", hll_estimate_column(F.col("rhos")).alias("a"), "n")


def decayed_values(reads: DataFrame, writes: DataFrame, kind: str, window_ms: int, inclusive: bool) -> DataFrame:
    """Point-in-time values of ``Decayed*`` (the *recurrence* strategy, module docstring).

    Args:
        reads: ``r_seq``, ``r_t``, ``r_rk``.
        writes: ``w_rk``, ``t``, ``seq``, ``v0`` (for sum/average).
        kind: ``"count"``, ``"sum"`` or ``"average"``.
        window_ms: the decay constant ``W`` in ms.
        inclusive: whether a read counts its own write.

    Returns:
        ``r_seq``, ``r_rk``, ``a`` (double), ``n`` (1 if any write counts, else 0).

    Source: SPEC §2.4 (``Decayed*``: weight ``exp(-(t - s) / W)``);
    ``compiler.algebra.ops.DecayedOp`` (the store's ``dt``/``dv``/``dw``).
    """
    E = EPOCH_WINDOWS * window_ms
    Wd = F.lit(float(window_ms))
    v = F.lit(1.0) if kind == "count" else F.col("v0").cast("double")
    anchor = _floor_mult(F.col("t"), E)
    grow = F.exp((F.col("t") - anchor).cast("double") / Wd)
    w = writes.select("w_rk", "t", "seq", (anchor / _long(E)).cast("long").alias("e"),
                      (v * grow).alias("uv"), grow.alias("uw"))
    run = Window.partitionBy("w_rk", "e").orderBy("t", "seq").rowsBetween(Window.unboundedPreceding, Window.currentRow)
    w = w.select("w_rk", "t", "seq", "e", F.sum("uv").over(run).alias("pv"), F.sum("uw").over(run).alias("pw"))
    totals = w.groupBy("w_rk", "e").agg(F.max_by("pv", F.struct("t", "seq")).alias("qv"),
                                       F.max_by("pw", F.struct("t", "seq")).alias("qw"))
    prev = totals.select(F.col("w_rk").alias("q_rk"), (F.col("e") + F.lit(1)).alias("q_e"), "qv", "qw")
    w = w.join(prev, (F.col("w_rk") == F.col("q_rk")) & (F.col("e") == F.col("q_e")), "left")
    since = (F.col("t") - F.col("e") * _long(E)).cast("double")
    down = F.exp(-since / Wd)
    carried = F.exp(-(since + F.lit(float(E))) / Wd)
    w = w.select("w_rk", "t", "seq",
                 (F.col("pv") * down + F.coalesce(F.col("qv"), F.lit(0.0)) * carried).alias("dv"),
                 (F.col("pw") * down + F.coalesce(F.col("qw"), F.lit(0.0)) * carried).alias("dw"),
                 F.col("t").alias("dt"))
    last = _running(reads, w, inclusive, ["dt", "dv", "dw"])
    j = reads.join(last, "r_seq", "left")
    n = F.when(F.coalesce(F.col("c"), _long(0)) > F.lit(0), _long(1)).otherwise(_long(0))
    if kind == "average":
        a = F.when(F.col("dw") > F.lit(0.0), F.col("dv") / F.col("dw"))
    else:
        f = F.exp(-(F.col("r_t") - F.col("dt")).cast("double") / Wd)
        a = (F.col("dw") if kind == "count" else F.col("dv")) * f
    return j.select("r_seq", "r_rk", a.alias("a"), n.alias("n"))
