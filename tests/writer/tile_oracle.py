"""The per-state forms of the store image, kept as the oracle of ``writer.tilepass`` (tests only).

Before ``writer.tilepass`` computed every merged-tile state in one pass,
``writer.tiles`` built each state's rows with its own ``groupBy``, one
branch per function; those branches, kept here unchanged, are what
``tests/writer/test_tilepass.py`` holds the one-pass forms to, row for row
(``state_rows`` for backfill, ``merge_rows`` for stream micro-batches). Write
logs and ``Decayed*`` are computed per state in production too
(``writer.tiles``), and these functions hand them to it.
"""

from __future__ import annotations

from typing import Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from compiler.algebra.ops import DecayedOp, make_op
from compiler.algebra.spark import encode_tuple_column, hll_coupon_columns, values_json_column
from compiler.algebra.windows import LEVEL_CODE, levels_s
from compiler.plan import StateSpec
from writer import tilepass, tiles


def _num_text(col: Column, type_name: str) -> Column:
    if type_name == "float":
        return col.cast("double").cast("string")
    if type_name == "bool":
        return F.when(col, F.lit("1")).otherwise(F.lit("0"))
    if type_name in ("int", "time"):
        return col.cast("long").cast("string")
    return col


def state_rows(writes: DataFrame, state: StateSpec, end_ms: int, start_ms: int | None = None) -> DataFrame:
    """Return the store image rows (module docstring) of one state.

    Args:
        writes: output of :func:`writes_of_state` over every event read,
            ending before ``end_ms``.
        state: the state.
        end_ms: end of the run window (exclusive, epoch ms).
        start_ms: start of the widened run window: writes before it are left
            out, except for ``Decayed*`` states, which are computed from every
            write read (they have no window).
    """
    W = state.window_s * 1000
    r = state.resolution_s * 1000
    ttl = F.lit(W + r).cast("long")
    cutoff = end_ms - W - r
    fn = state.function
    op = make_op(fn, state.value_types, window_s=state.window_s)
    writes = writes.where(F.col("t") < F.lit(end_ms))
    if isinstance(op, DecayedOp) or state.limit is not None:
        return tiles.state_rows(writes, state, end_ms, start_ms)
    if start_ms is not None:
        writes = writes.where(F.col("t") >= F.lit(start_ms))
    if fn == "CountUnique":
        enc = encode_tuple_column([F.col(f"v{i}") for i in range(len(state.value_types))], state.value_types)
        g = writes.groupBy("rk", enc.alias("u")).agg(F.max("t").alias("t")).where(F.col("t") > F.lit(cutoff))
        return g.select("rk", F.concat(F.lit("u"), "u").alias("field"), F.col("t").cast("string").alias("value"),
                        F.lit("seen").alias("mode"), ttl.alias("ttl_ms"))
    if fn in ("Latest", "LatestTime"):
        vals = [F.col(f"v{i}").alias(f"v{i}") for i in range(len(state.value_types))]
        payload = F.to_json(F.struct(*vals)) if vals else F.lit("")
        g = writes.groupBy("rk").agg(F.max_by(F.struct(F.col("t"), payload.alias("j")), F.struct("t", "seq")).alias("m"))
        g = g.where(F.col("m.t") > F.lit(cutoff))
        return g.select("rk", F.lit("lt").alias("field"),
                        F.concat(F.col("m.t").cast("string"), F.lit("\t"), F.col("m.j")).alias("value"),
                        F.lit("latest").alias("mode"), ttl.alias("ttl_ms"))
    g, parts = _tile_partials(writes, state)
    g = g.where((F.col("tile") + 1) * F.col("size") * F.lit(1000) > F.lit(cutoff))
    return _union([
        g.select("rk", _tile_field_column(state, suffix).alias("field"), F.col(f"p{i}").alias("value"),
                 F.lit("set").alias("mode"), ttl.alias("ttl_ms"))
        for i, (suffix, _) in enumerate(parts)
    ])


def _union(frames: list[DataFrame]) -> DataFrame:
    out = frames[0]
    for f in frames[1:]:
        out = out.unionByName(f)
    return out


def _tile_field_column(state: StateSpec, suffix: str) -> Column:
    """The hash field name ``<level code><tile><suffix>`` of rows with ``size`` and ``tile`` (``ops.tile_field``)."""
    sizes = levels_s(state.window_s)
    code = F.create_map(*[x for size in sizes for x in (F.lit(size).cast("long"), F.lit(LEVEL_CODE[size]))])
    return F.concat(F.element_at(code, F.col("size")), F.col("tile").cast("string"), F.lit(suffix))


def _tile_partials(writes: DataFrame, state: StateSpec) -> tuple[DataFrame, list[tuple[str, str]]]:
    """Aggregate a tiled state's writes into one partial per (key, tile size, tile).

    Args:
        writes: output of :func:`writes_of_state` (``rk``, ``t``, ``seq``, ``v0..``).
        state: a tiled state (not ``Decayed*``, ``CountUnique``, ``Latest*``,
            nor a write log).

    Returns:
        ``(g, parts)``: ``g`` has ``rk``, ``size`` (s), ``tile``, ``t`` (the
        latest write time in the tile, ms) and ``p0..pk``, the stored text of
        each IR component (``AggregateOp.encode``); ``parts`` lists per
        component its field suffix and its merge op in ``event.lua`` (``I``,
        ``F``, ``MIN:<kind>``, ``MAX:<kind>``, ``FI``, ``HMS``).

    Raises:
        NotImplementedError: a function with no tiles.
    """
    fn = state.function
    op = make_op(fn, state.value_types, window_s=state.window_s)
    # every write lands in one tile per stored size: explode to (size, tile)
    # and aggregate all sizes in ONE groupBy (one shuffle per state)
    sizes = levels_s(state.window_s)
    slots = F.explode(F.array(*[
        F.struct(F.lit(size).cast("long").alias("size"), F.floor(F.col("t") / F.lit(size * 1000)).cast("long").alias("tile"))
        for size in sizes
    ])).alias("_lvl")
    nv = len(state.value_types)
    extra = []
    if fn in ("First", "FirstTime"):
        extra = [F.struct(F.col("t"), values_json_column(0 if fn == "FirstTime" else nv).alias("j")).alias("tj")]
    elif fn == "HyperLogLog":
        slot, rho = hll_coupon_columns(encode_tuple_column([F.col(f"v{i}") for i in range(nv)], state.value_types))
        extra = [slot.alias("slot"), rho.alias("rho")]
    v0 = F.col("v0") if "v0" in writes.columns else F.lit(None).alias("v0")
    exploded = writes.select("rk", "t", "seq", v0.alias("v0"), *extra, slots)
    exploded = exploded.select("*", F.col("_lvl.size").alias("size"), F.col("_lvl.tile").alias("tile")).drop("_lvl")
    keys = ["rk", "size", "tile"]
    latest = [F.max("t").alias("t")]
    if fn == "Count":
        parts = [("", "I", F.count(F.lit(1)).cast("string"))]
    elif fn == "Sum":
        if op.is_int:
            # exact past int64 by a decimal sum (the writer splits each value in halves instead)
            parts = [("", "I", F.sum(F.col("v0").cast("long").cast("decimal(38,0)")).cast("string"))]
        else:
            parts = [("", "F", F.sum(F.col("v0").cast("double")).cast("string"))]
    elif fn == "Average":
        parts = [(".s", "F", F.sum(F.col("v0").cast("double")).cast("string")),
                 (".c", "I", F.count(F.lit(1)).cast("string"))]
    elif fn in ("Min", "Max"):
        agg = F.min if fn == "Min" else F.max
        t = state.value_types[0]
        kind = "s" if t == "string" else "i" if t in ("int", "time") else "n"
        parts = [("", f"{fn.upper()}:{kind}", _num_text(agg(F.col("v0")), t))]
    elif fn in ("First", "FirstTime"):
        first = F.min_by(F.col("tj"), F.struct("t", "seq"))
        parts = [("", "FI", F.concat(first.getField("t").cast("string"), F.lit("\t"), first.getField("j")))]
    elif fn == "HyperLogLog":
        exploded = exploded.groupBy(*keys, "slot").agg(F.max("rho").alias("rho"), F.max("t").alias("t"))
        entry = F.concat(F.lit(";"), F.col("slot").cast("string"), F.lit(":"), F.col("rho").cast("string"))
        parts = [("", "HMS", F.concat_ws("", F.array_sort(F.collect_list(entry))))]
    else:
        raise NotImplementedError(f"tiles of {fn} are not implemented")
    g = exploded.groupBy(*keys).agg(*latest, *[c.alias(f"p{i}") for i, (_, _, c) in enumerate(parts)])
    return g, [(suffix, mode) for suffix, mode, _ in parts]


#: Columns of :func:`merge_rows`.
MERGE_COLUMNS = ("rk", "field", "value", "mode", "t")


def merge_rows(writes: DataFrame, state: StateSpec) -> DataFrame:
    """Return a micro-batch's partial aggregates of one state as merge ops (columns :data:`MERGE_COLUMNS`).

    The per-state oracle of the stream's Arrow pass
    (``compiler.algebra.arrowtiles.merge_ops``): one branch per function, as
    the stream ran before the one pass (the ``mode`` column is the
    ``event.lua`` op, listed in ``arrowtiles``' module docstring).
    """
    fn = state.function
    op = make_op(fn, state.value_types, window_s=state.window_s)
    nv = len(state.value_types)
    if isinstance(op, DecayedOp) or state.limit is not None:
        return _log_or_decayed_merge_rows(writes, state)
    if fn == "CountUnique":
        enc = encode_tuple_column([F.col(f"v{i}") for i in range(nv)], state.value_types)
        g = writes.groupBy("rk", enc.alias("u")).agg(F.max("t").alias("t"))
        return g.select("rk", F.concat(F.lit("u"), "u").alias("field"), F.col("t").cast("string").alias("value"),
                        F.lit("SEEN").alias("mode"), "t")
    if fn in ("Latest", "LatestTime"):
        vals = [F.col(f"v{i}").alias(f"v{i}") for i in range(nv)]
        payload = F.to_json(F.struct(*vals)) if vals else F.lit("")
        g = writes.groupBy("rk").agg(F.max_by(F.struct(F.col("t"), payload.alias("j")), F.struct("t", "seq")).alias("m"))
        return g.select("rk", F.lit("lt").alias("field"),
                        F.concat(F.col("m.t").cast("string"), F.lit("\t"), F.col("m.j")).alias("value"),
                        F.lit("LA").alias("mode"), F.col("m.t").alias("t"))
    g, parts = _tile_partials(writes, state)
    # one projection (no union): each output partition is one of g's, so a
    # key's rows stay in one partition when ``writes`` is partitioned by rk
    comps = F.explode(F.array(*[
        F.struct(_tile_field_column(state, suffix).alias("field"), F.col(f"p{i}").alias("value"),
                 F.lit(mode).alias("mode"))
        for i, (suffix, mode) in enumerate(parts)
    ])).alias("c")
    return g.select("rk", comps, "t").select("rk", "c.field", "c.value", "c.mode", "t")


def _log_or_decayed_merge_rows(writes: DataFrame, state: StateSpec) -> DataFrame:
    """The ``DM`` (``Decayed*``) or ``ZM`` (write log) merge op of one state, one row per key.

    ``DM``: ``dt`` -> ``ms\\tv\\tw``, the sums weighed to the key's latest
    write; ``ZM``: ``""`` -> the JSON list of the key's ``n`` latest writes
    ``[{"t", "r", "j"}]`` oldest first (``r``: rank among the key's writes
    at ``t``). What the stream's Spark jobs computed before the Arrow pass.
    """
    from pyspark.sql import Window

    from compiler.algebra.registry import storage_of
    from compiler.algebra.spark import SPARK

    nv = len(state.value_types)
    storage = storage_of(state)
    if storage == "decayed":
        W = state.window_s * 1000
        v = SPARK[state.function].decay_value([F.col(f"v{i}") for i in range(nv)])
        w = writes.select("rk", "t", v.alias("v"), F.max("t").over(Window.partitionBy("rk")).alias("dt"))
        weight = F.exp((F.col("t") - F.col("dt")).cast("double") / F.lit(float(W)))
        g = w.groupBy("rk", "dt").agg(F.sum(F.col("v") * weight).alias("dv"), F.sum(weight).alias("dw"))
        value = F.concat_ws("\t", F.col("dt").cast("string"), F.col("dv").cast("string"), F.col("dw").cast("string"))
        return g.select("rk", F.lit("dt").alias("field"), value.alias("value"), F.lit("DM").alias("mode"),
                        F.col("dt").alias("t"))
    by_ms = Window.partitionBy("rk", "t").orderBy("seq")
    latest = Window.partitionBy("rk").orderBy(F.col("t").desc(), F.col("seq").desc())
    w = writes.select("rk", "t", (F.row_number().over(by_ms) - 1).alias("r"),
                      values_json_column(nv).alias("j"), F.row_number().over(latest).alias("k"))
    w = w.where(F.col("k") <= F.lit(state.limit))
    g = w.groupBy("rk").agg(F.to_json(F.array_sort(F.collect_list(F.struct("t", "r", "j")))).alias("value"),
                            F.max("t").alias("t"))
    return g.select("rk", F.lit("").alias("field"), "value", F.lit("ZM").alias("mode"), "t")


def write_rows(frames: dict[str, DataFrame], states: Sequence[StateSpec], partitions: int) -> DataFrame:
    """(The stream's per-event-type path before ``writer.tilepass.batch_write_rows``, kept as its oracle.)

    A micro-batch's counted writes of every state, hash-partitioned by key, for the Arrow merge pass.

    One exploding projection per writer event type, all its states' writes
    in it: the caller plans the job without whole-stage code generation
    (``writer.session.without_codegen``; a generated method over this many
    structs would exceed the JVM's 64 KB limit), so each event's features
    are computed once, without a checkpoint. The same write rules as
    :func:`partial_rows` (``counted``, ``where``, non-null values and key
    components, SPEC §2.4); then one shuffle by ``rk``. The partial
    aggregates are computed per partition by
    ``compiler.algebra.arrowtiles.merge_ops`` (no Spark aggregation: the
    stream's micro-batches are small, and each Spark stage costs more than
    their work).

    Args:
        frames: ``writer.tiles.feature_frames`` output for the batch's events.
        states: the states written (``g`` indexes them).
        partitions: partitions of the shuffle (the cores).

    Returns:
        The columns of ``writer.tilepass.batch_write_rows``; all rows of a key
        in one partition.
    """
    writes = tilepass._write_structs(frames, states, "all", per_projection=len(states) or 1)
    if writes is None:
        return None
    return writes.repartition(partitions, "rk")
