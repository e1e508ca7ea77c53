"""Events -> partial aggregates per (state, entity key, tile), with Spark built-ins.

For every state of the plan (``compiler.plan.StateSpec``) this module builds
rows of the *store image* that the online path would have built from the same
events (layout: ``compiler/algebra/ops.py``):

    rk: string     Redis hash name  sc:{<entity key>}:<definition hash>
    field: string  hash field       m22616640, h376944.s, u<tuple>, lt, lv
    value: string  stored text      what ``AggregateOp.encode`` produces
    mode: string   "set" (overwrite: a tile complete within the run window),
                   "seen" (keep the max: CountUnique last-seen ms),
                   "latest" (newer wins: value = "<ms>\\t<json>"),
                   "log" (a write log: see ``_log_rows``)
    ttl_ms: long   expiry W + r (SPEC §5.3)

Tile partials use one ``groupBy(rk, size, tile).agg(count/sum/min/max)`` over
the writes exploded to one row per stored tile size; no Python
UDF (SPEC §5.6). Only state a read at or after the run's end can use is
emitted: tiles ending after ``end - W - r`` (older ones would be pruned by the
online path anyway, SPEC §5.3).
"""

from __future__ import annotations

from typing import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from compiler.algebra.keys import MAX_KEY_CHARS, PREFIX
from compiler.algebra.ops import DECAY_HORIZON, HLL_Q, DecayedOp, make_op
from compiler.algebra.windows import LEVEL_CODE, levels_s
from compiler.plan import Plan, StateSpec
from writer.features import with_features

ROW_COLUMNS = ("rk", "field", "value", "mode", "ttl_ms")


def encode_component_column(col: Column, type_name: str) -> Column:
    """Spark twin of ``compiler.algebra.keys.encode_component``."""
    if type_name == "string":
        return F.concat(F.lit("s"), F.length(col).cast("string"), F.lit(":"), col)
    if type_name == "int":
        return F.concat(F.lit("i"), col.cast("long").cast("string"))
    if type_name == "time":
        return F.concat(F.lit("t"), col.cast("long").cast("string"))
    if type_name == "bool":
        return F.when(col, F.lit("b1")).otherwise(F.lit("b0"))
    if type_name in ("float", "duration"):
        return F.concat(F.lit("f" if type_name == "float" else "d"), col.cast("double").cast("string"))
    raise ValueError(f"cannot use a value of type {type_name} as a key")


def encode_tuple_column(cols: Sequence[Column], types: Sequence[str]) -> Column:
    """Spark twin of ``compiler.algebra.keys.encode_key`` for non-null components.

    Returns the escaped, length-bounded encoding (SPEC §5.5).
    """
    if cols:
        raw = F.concat_ws("|", *[encode_component_column(c, t) for c, t in zip(cols, types)])
    else:
        raw = F.lit("")
    esc = F.replace(F.replace(F.replace(raw, F.lit("%"), F.lit("%25")), F.lit("{"), F.lit("%7B")), F.lit("}"), F.lit("%7D"))
    return F.when(F.length(esc) > MAX_KEY_CHARS, F.concat(F.lit("#"), F.substring(F.sha2(esc, 256), 1, 40))).otherwise(esc)


def feature_frames(raw: DataFrame, plan: Plan, states: Sequence[StateSpec], history: DataFrame | None = None,
                   history_start_ms: int | None = None, progress=None, persist: bool = False) -> dict[str, DataFrame]:
    """Compute, once per writer event type, every feature its state writes need.

    A write whose key, value or filter depends on an aggregate (a dependency
    stage, SPEC §2.4, §5.6) gets the value that aggregate had when the writer
    event was processed online, from ``writer.pointintime`` over ``history``:
    it needs the events before ``raw``'s too (up to the aggregates' windows
    ``W + r``, summed along nested stages, and all of them for ``Decayed*``,
    see ``writer.pointintime.lookback_ms``).

    Args:
        raw: valid raw events (``_type``, ``_time_ms``, ``_seq``, ``_raw``)
            whose writes are computed.
        plan: the plan.
        states: the states to be written.
        history: valid raw events the point-in-time values are computed from:
            every event of ``raw`` (same ``_seq``) and the ones before them;
            default ``raw`` itself. Only read when a write needs an aggregate.
        history_start_ms: the earliest event time in ``raw`` that matters
            (epoch ms); ``history`` is then cut to events at or after it
            minus the lookback. ``None``: all of ``history`` is used.
        progress: optional callback ``(phase, done, total)``: phases
            ``stage <k>`` (the aggregates of dependency stage ``k``, computed
            one stage after the other) and ``features`` (one step per event type).
        persist: persist (``MEMORY_AND_DISK``) and compute every frame, not
            only those with aggregate features.

    Returns:
        ``{event type: DataFrame}`` with ``_time_ms``, ``_seq`` and ``f_<feature>``
        columns. Frames of plain (stage-0) features are unpersisted: the
        caller persists them so that the (large) input-coercion expressions
        are evaluated once, not once per state and tile level. Frames with
        aggregate features are returned persisted (``MEMORY_AND_DISK``) and
        computed, and the intermediate point-in-time values freed; the
        caller's ``persist`` is then a no-op and its ``unpersist`` frees them.

    Raises:
        writer.features.StagedFeatureError: aggregates that depend on each
            other across event types (no dependency stage exists).
    """
    from pyspark import StorageLevel

    from writer.features import needed_features
    from writer.pointintime import PointInTime, dependency_stages, lookback_ms

    report = progress or (lambda phase, done, total: None)

    needs: dict[str, set[str]] = {}
    for st in states:
        for ev, w in st.writes.items():
            needs.setdefault(ev, set()).update(w.deps())
    # writer events whose writes need an aggregate's value (a dependency stage)
    staged_events = {
        ev for ev, names in needs.items()
        if any(plan.events[ev].feature(n).kind == "aggregate" for n in needed_features(plan.events[ev], names))
    }
    staged: PointInTime | None = None
    if staged_events:
        hist = raw if history is None else history
        lookbacks = [lookback_ms(plan, ev, sorted(needs[ev])) for ev in sorted(staged_events)]
        if history_start_ms is not None and None not in lookbacks:
            hist = hist.where(F.col("_time_ms") >= F.lit(history_start_ms - max(lookbacks)))
        staged = PointInTime(hist, plan)
        staged.prepare({ev: sorted(needs[ev]) for ev in staged_events})
        # the aggregates writes need, one dependency stage after the other
        for k, group in enumerate(dependency_stages(plan, needs), start=1):
            report(f"stage {k}", 0, len(group))
            stage_needs: dict[str, list[str]] = {}
            for ev, name in group:
                stage_needs.setdefault(ev, []).append(name)
            staged.prefetch(stage_needs)  # the whole stage at once (one sweep)
            report(f"stage {k}", len(group), len(group))
    out = {}
    report("features", 0, len(needs))
    for i, (ev, names) in enumerate(sorted(needs.items()), start=1):
        df = raw.where(F.col("_type") == F.lit(ev)).select("_time_ms", "_seq", "_raw")
        df = with_features(df, plan.events[ev], sorted(names), staged=staged)
        out[ev] = df.drop("_raw")
        if persist or ev in staged_events:
            out[ev] = out[ev].persist(StorageLevel.MEMORY_AND_DISK)
            out[ev].count()
        report("features", i, len(needs))
    if staged is not None:
        staged.release()
    return out


def writes_of_state(frames: dict[str, DataFrame], state: StateSpec) -> DataFrame:
    """Return the counted writes of one state: ``rk``, ``t`` (ms), ``seq``, ``v0..vn``.

    Applies SPEC §2.4's write rules per writer event: the ``where`` filter
    (null is false), non-null values, non-null key components.

    Args:
        frames: output of :func:`feature_frames`.
        state: the state.
    """
    from compiler.codegen.spark import compile_column

    parts = []
    for ev, w in sorted(state.writes.items()):
        df = frames[ev]
        cond = F.lit(True)
        if w.where is not None:
            cols = {n: F.col(f"f_{n}") for n in w.where.refs()}
            cond = F.coalesce(compile_column(w.where, cols, F.col("_time_ms")), F.lit(False))
        for n in list(w.values) + list(w.keys):
            cond = cond & F.col(f"f_{n}").isNotNull()
        df = df.where(cond)
        key = encode_tuple_column([F.col(f"f_{k}") for k in w.keys], state.key_types)
        rk = F.concat(F.lit(PREFIX + "{"), key, F.lit("}:" + state.definition_hash))
        parts.append(
            df.select(
                rk.alias("rk"),
                F.col("_time_ms").alias("t"),
                F.col("_seq").alias("seq"),
                *[F.col(f"f_{n}").alias(f"v{i}") for i, n in enumerate(w.values)],
            )
        )
    out = parts[0]
    for f in parts[1:]:
        out = out.unionByName(f)
    return out


def _num_text(col: Column, type_name: str) -> Column:
    if type_name == "float":
        return col.cast("double").cast("string")
    if type_name == "bool":
        return F.when(col, F.lit("1")).otherwise(F.lit("0"))
    if type_name in ("int", "time"):
        return col.cast("long").cast("string")
    return col


def _values_json_column(n: int, cols: Sequence[Column] | None = None) -> Column:
    """Spark twin of ``ops.values_json``: ``{"v0": .., ..}`` (``{}`` for no values).

    Args:
        n: number of values.
        cols: the value columns (default the columns ``v0 .. v<n-1>``).
    """
    if n == 0:
        return F.lit("{}")
    cols = [F.col(f"v{i}") for i in range(n)] if cols is None else cols
    return F.to_json(F.struct(*[c.alias(f"v{i}") for i, c in enumerate(cols)]))


def hll_coupon_columns(item: Column) -> tuple[Column, Column]:
    """Spark twin of ``ops.hll_coupon``: ``(slot, rho)`` from the MD5 hex digest of ``item``."""
    h = F.md5(item)
    slot = F.conv(F.substring(h, 1, 3), 16, 10).cast("int")
    bits = F.conv(F.substring(h, 4, 13), 16, 2)
    rho = F.when(bits == F.lit("0"), F.lit(HLL_Q + 1)).otherwise(F.lit(HLL_Q + 1) - F.length(bits))
    return slot, rho.cast("int")


def _log_rows(writes: DataFrame, state: StateSpec, start_ms: int, end_ms: int, cutoff: int, ttl: Column) -> DataFrame:
    """Write-log rows (mode ``log``): one per entity key, the ``n`` latest members.

    ``field`` is ``<start_ms>:<end_ms>:<n>`` (the sink replaces the log's
    members scored in ``[start, end)``, then trims to ``n``); ``value`` is the
    JSON list ``[{"t": ms, "m": member}, ..]`` (``ops.log_member`` layout).
    """
    n = state.limit
    by_ms = Window.partitionBy("rk", "t").orderBy("seq")
    latest = Window.partitionBy("rk").orderBy(F.col("t").desc(), F.col("seq").desc())
    member = F.concat(
        F.lpad((F.row_number().over(by_ms) - 1).cast("string"), 8, "0"),
        F.col("t").cast("string"), F.lit(":"), _values_json_column(len(state.value_types)),
    )
    w = writes.select("rk", "t", member.alias("m"), F.row_number().over(latest).alias("k"))
    w = w.where((F.col("k") <= F.lit(n)) & (F.col("t") > F.lit(cutoff)))
    g = w.groupBy("rk").agg(F.to_json(F.collect_list(F.struct("t", "m"))).alias("value"))
    return g.select("rk", F.lit(f"{start_ms}:{end_ms}:{n}").alias("field"), "value",
                    F.lit("log").alias("mode"), ttl.alias("ttl_ms"))


def _decayed_rows(writes: DataFrame, state: StateSpec) -> DataFrame:
    """``Decayed*`` rows: ``dt`` (latest write ms), ``dv``/``dw`` weighed to it (``ops.DecayedOp``)."""
    W = state.window_s * 1000
    v = F.lit(1.0) if state.function == "DecayedCount" else F.col("v0").cast("double")
    latest = Window.partitionBy("rk")
    w = writes.select("rk", "t", v.alias("v"), F.max("t").over(latest).alias("dt"))
    weight = F.exp((F.col("t") - F.col("dt")).cast("double") / F.lit(float(W)))
    g = w.groupBy("rk", "dt").agg(F.sum(F.col("v") * weight).alias("dv"), F.sum(weight).alias("dw"))
    ttl = F.lit(DECAY_HORIZON * W).cast("long")
    return g.select("rk", F.array(
        F.struct(F.lit("dt").alias("f"), F.col("dt").cast("string").alias("x")),
        F.struct(F.lit("dv").alias("f"), F.col("dv").cast("string").alias("x")),
        F.struct(F.lit("dw").alias("f"), F.col("dw").cast("string").alias("x")),
    ).alias("a")).select("rk", F.explode("a").alias("p")).select(
        "rk", F.col("p.f").alias("field"), F.col("p.x").alias("value"), F.lit("set").alias("mode"), ttl.alias("ttl_ms"))


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
    if isinstance(op, DecayedOp):
        return _decayed_rows(writes, state)
    if start_ms is not None:
        writes = writes.where(F.col("t") >= F.lit(start_ms))
    if state.limit is not None:
        return _log_rows(writes, state, start_ms if start_ms is not None else cutoff, end_ms, cutoff, ttl)
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
        extra = [F.struct(F.col("t"), _values_json_column(0 if fn == "FirstTime" else nv).alias("j")).alias("tj")]
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
            parts = [("", "I", F.sum(F.col("v0").cast("long")).cast("string"))]
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
    """Return a micro-batch's partial aggregates of one state as merge ops (SPEC §5.7).

    Unlike :func:`state_rows` (complete tiles that overwrite), these rows are
    *merged* into whatever the store holds -- earlier batches and the online
    API add to the same tiles -- by the ``event.lua`` op named in ``mode``
    (``writer.sink.merge_partition`` applies them, guarded per key):

    ============ ===================== =========================================
    mode         field / value         merge (``ops.AggregateOp.merge``)
    ============ ===================== =========================================
    ``I``/``F``  tile / partial count  add (int exact, resp. float)
                 or sum
    ``MIN:k``    tile / partial        keep the smaller / larger (``k``: ``n``
    ``MAX:k``    extreme               float, ``i`` int64 text, ``s`` string)
    ``FI``       tile / ``ms\\tjson``   the earlier write wins (``First``)
    ``HMS``      tile / ``;slot:rho``  register-wise max (``HyperLogLog``)
    ``SEEN``     ``u<tuple>`` / ms     keep the later time (``CountUnique``)
    ``LA``       ``lt`` / ``ms\\tjson`` the later write wins (``Latest*``)
    ``DM``       ``dt`` / ``ms\\tv\\tw``  decayed sums weighed at ``ms`` combine
    ``ZM``       ``""`` / JSON list    write log: the batch's ``n`` latest
                                       writes ``[{"t", "r", "j"}]`` oldest
                                       first (``r``: rank among the batch's
                                       writes of the key at ``t``), added in
                                       order, then trimmed as ``ZW`` does
    ============ ===================== =========================================

    All partials are computed with Spark built-ins, as :func:`state_rows`
    computes tiles (no Python UDF). Every row of one ``rk`` comes from one
    partition of ``writes`` when ``writes`` is hash-partitioned by ``rk``
    (aggregations over ``rk`` and projections only, no union), so
    ``writes.repartition(n, "rk")`` gives one call per key in the sink.

    Args:
        writes: output of :func:`writes_of_state` for the batch's events.
        state: the state.

    Returns:
        Columns :data:`MERGE_COLUMNS`; ``t`` (long, epoch ms) is the latest
        write time the row holds (the key's latest one drives pruning).
    """
    fn = state.function
    op = make_op(fn, state.value_types, window_s=state.window_s)
    nv = len(state.value_types)
    if isinstance(op, DecayedOp):
        W = state.window_s * 1000
        v = F.lit(1.0) if fn == "DecayedCount" else F.col("v0").cast("double")
        w = writes.select("rk", "t", v.alias("v"), F.max("t").over(Window.partitionBy("rk")).alias("dt"))
        weight = F.exp((F.col("t") - F.col("dt")).cast("double") / F.lit(float(W)))
        g = w.groupBy("rk", "dt").agg(F.sum(F.col("v") * weight).alias("dv"), F.sum(weight).alias("dw"))
        value = F.concat_ws("\t", F.col("dt").cast("string"), F.col("dv").cast("string"), F.col("dw").cast("string"))
        return g.select("rk", F.lit("dt").alias("field"), value.alias("value"), F.lit("DM").alias("mode"),
                        F.col("dt").alias("t"))
    if state.limit is not None:
        by_ms = Window.partitionBy("rk", "t").orderBy("seq")
        latest = Window.partitionBy("rk").orderBy(F.col("t").desc(), F.col("seq").desc())
        w = writes.select("rk", "t", (F.row_number().over(by_ms) - 1).alias("r"),
                          _values_json_column(nv).alias("j"), F.row_number().over(latest).alias("k"))
        w = w.where(F.col("k") <= F.lit(state.limit))
        g = w.groupBy("rk").agg(F.to_json(F.array_sort(F.collect_list(F.struct("t", "r", "j")))).alias("value"),
                                F.max("t").alias("t"))
        return g.select("rk", F.lit("").alias("field"), "value", F.lit("ZM").alias("mode"), "t")
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
