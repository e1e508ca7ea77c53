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

This module computes the rows of the states that are not tiles: write logs
(a ``limit``, ``Sequence``, ``Set``) and ``Decayed*`` sums, one state at a
time, with Spark built-ins (no Python UDF, SPEC §5.6); ``writer.tilepass``
computes every other state in one pass. It also computes the feature columns
every state write needs (:func:`feature_frames`). Only state a read at or
after the run's end can use is emitted: log members after ``end - W - r``
(older ones would be pruned by the online path anyway, SPEC §5.3).
"""

from __future__ import annotations

from typing import Sequence

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

from compiler.algebra.registry import expiry_ms, storage_of
from compiler.algebra.spark import SPARK, values_json_column
from compiler.algebra.windows import ALLOWED_LATENESS_S
from compiler.plan import Plan, StateSpec
from writer.features import with_features
from writer.sources import carried_columns

ROW_COLUMNS = ("rk", "field", "value", "mode", "ttl_ms")


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
        df = raw.where(F.col("_type") == F.lit(ev)).select(*carried_columns(raw), "_raw")
        df = with_features(df, plan.events[ev], sorted(names), staged=staged)
        out[ev] = df.drop("_raw")
        if persist or ev in staged_events:
            out[ev] = out[ev].persist(StorageLevel.MEMORY_AND_DISK)
            out[ev].count()
        report("features", i, len(needs))
    if staged is not None:
        staged.release()
    return out


def _log_rows(writes: DataFrame, state: StateSpec, start_ms: int, end_ms: int, cutoff: int, ttl: Column) -> DataFrame:
    """Write-log rows (mode ``log``): one per entity key, the members of the allowed lateness before its latest
    (``compiler.algebra.windows.ALLOWED_LATENESS_S``, SPEC §3.3) and the ``n`` latest before those (as
    serving keeps).

    ``field`` is ``<start_ms>:<end_ms>:<n>`` (the sink replaces the log's
    members scored in ``[start, end)``, then trims to ``n``); ``value`` is the
    JSON list ``[{"t": ms, "m": member}, ..]`` (``ops.log_member`` layout); the sink trims the log
    the same way (``event.lua``'s ``ZT``).
    """
    n = state.limit
    by_ms = Window.partitionBy("rk", "t").orderBy("seq")
    member = F.concat(
        F.lpad((F.row_number().over(by_ms) - 1).cast("string"), 8, "0"),
        F.col("t").cast("string"), F.lit(":"), values_json_column(len(state.value_types)),
    )
    # every write of the allowed lateness before the key's latest, and the n latest before that (what
    # serving keeps, SPEC §3.3: a read up to that late finds the n latest writes up to its time)
    late = ALLOWED_LATENESS_S * 1000
    w = writes.select("rk", "t", "seq", member.alias("m"), F.max("t").over(Window.partitionBy("rk")).alias("top"))
    w = w.withColumn("recent", F.col("t") >= F.col("top") - F.lit(late))
    latest = Window.partitionBy("rk", "recent").orderBy(F.col("t").desc(), F.col("seq").desc())
    w = w.withColumn("k", F.row_number().over(latest))
    w = w.where((F.col("recent") | (F.col("k") <= F.lit(n))) & (F.col("t") > F.lit(cutoff)))
    g = w.groupBy("rk").agg(F.to_json(F.collect_list(F.struct("t", "m"))).alias("value"))
    return g.select("rk", F.lit(f"{start_ms}:{end_ms}:{n}").alias("field"), "value",
                    F.lit("log").alias("mode"), ttl.alias("ttl_ms"))


def _decayed_rows(writes: DataFrame, state: StateSpec) -> DataFrame:
    """``Decayed*`` rows: ``dt`` (latest write ms), ``dv``/``dw`` weighed to it (``ops.DecayedOp``)."""
    W = state.window_s * 1000
    v = SPARK[state.function].decay_value([F.col(f"v{i}") for i in range(len(state.value_types))])
    latest = Window.partitionBy("rk")
    w = writes.select("rk", "t", v.alias("v"), F.max("t").over(latest).alias("dt"))
    weight = F.exp((F.col("t") - F.col("dt")).cast("double") / F.lit(float(W)))
    g = w.groupBy("rk", "dt").agg(F.sum(F.col("v") * weight).alias("dv"), F.sum(weight).alias("dw"))
    ttl = F.lit(expiry_ms(state)).cast("long")
    return g.select("rk", F.array(
        F.struct(F.lit("dt").alias("f"), F.col("dt").cast("string").alias("x")),
        F.struct(F.lit("dv").alias("f"), F.col("dv").cast("string").alias("x")),
        F.struct(F.lit("dw").alias("f"), F.col("dw").cast("string").alias("x")),
    ).alias("a")).select("rk", F.explode("a").alias("p")).select(
        "rk", F.col("p.f").alias("field"), F.col("p.x").alias("value"), F.lit("set").alias("mode"), ttl.alias("ttl_ms"))


def state_rows(writes: DataFrame, state: StateSpec, end_ms: int, start_ms: int | None = None) -> DataFrame:
    """Return the store image rows (module docstring) of one write-log or ``Decayed*`` state.

    Args:
        writes: output of ``writer.writes.writes_of_state`` over every event
            read, ending before ``end_ms``.
        state: the state (``compiler.algebra.registry.storage_of``: ``log``
            or ``decayed``).
        end_ms: end of the run window (exclusive, epoch ms).
        start_ms: start of the widened run window: writes before it are left
            out, except for ``Decayed*`` states, which are computed from every
            write read (they have no window).

    Raises:
        ValueError: a state ``writer.tilepass`` computes (tiles, ``seen``, ``latest``).
    """
    W = state.window_s * 1000
    r = state.resolution_s * 1000
    cutoff = end_ms - W - r - ALLOWED_LATENESS_S * 1000
    storage = storage_of(state)
    writes = writes.where(F.col("t") < F.lit(end_ms))
    if storage == "decayed":
        return _decayed_rows(writes, state)
    if storage != "log":
        raise ValueError(f"{state.function} states ({storage}) are computed by writer.tilepass")
    if start_ms is not None:
        writes = writes.where(F.col("t") >= F.lit(start_ms))
    ttl = F.lit(expiry_ms(state)).cast("long")
    return _log_rows(writes, state, start_ms if start_ms is not None else cutoff, end_ms, cutoff, ttl)
