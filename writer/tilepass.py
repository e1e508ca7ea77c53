"""Partial aggregates of many states in one pass: one explode per event type, one ``groupBy`` per kind of partial.

``writer.tiles`` builds each state's tiles with its own ``groupBy``: one
shuffle, one Spark job and a few thousand py4j calls per state. For a stream
micro-batch that planning alone took longer than the batch's work (5 s of
py4j calls for the 20 states of the demo topology), and a backfill ran one
job per state. This module computes the partial aggregates of every
*merged-tile* state (``Count``, ``Sum``, ``Average``, ``Min``, ``Max``,
``First*``, ``HyperLogLog``, ``CountUnique``, ``Latest*``; not write logs
nor ``Decayed*``) together, in the shape of Chronon's UnionJoin:

1. per writer event type, a projection (a few states per projection, see
   :data:`STRUCTS_PER_PROJECTION`) turns each event into an array of write
   structs, one per state it writes (``g``: the state's index; its
   ``where`` filter and non-null rules applied, SPEC §2.4), exploded once;
2. each write is exploded once more to its stored tile sizes (the state's
   ladder, ``compiler.algebra.windows.levels_s``; size 0 for the untiled
   ``CountUnique`` and ``Latest*``); a backfill keeps only the tiles a read
   at its end can use, before aggregating (on the grouping keys);
3. one built-in aggregation per kind of partial (:data:`_SCHEMAS`), grouped
   by ``(g, rk, size, tile)``: ``num`` (fixed-width buffers, so Spark's
   hash aggregate: counts, long and double sums, numeric extrema), ``hll``
   (max rho per register slot, then the register text), ``uniq``
   (``CountUnique``'s last-seen time per value tuple) and ``obj`` (string
   extrema, ``First``/``Latest`` by ``min_by``/``max_by`` over ``(t, seq)``:
   a sort aggregate, kept apart so the others stay hash aggregates);
4. each group becomes the stored field(s) of its state, with the merge op
   ``event.lua`` applies (:data:`OPS`).

The stored text is the one ``writer.tiles`` produced per state (the same
Spark expressions: ``cast(... as string)``, ``to_json``, the MD5 coupon), so
the store image does not change: ``tests/writer/test_tilepass.py`` compares
the two row for row. The column trees are built once per process
(``writer.session.memo_column``): a stream rebuilds the plan every
micro-batch.

Callers: ``writer.backfill`` (store-image rows, :func:`state_rows_all`) and
``writer.stream`` (:func:`batch_write_rows`: every state's writes, whose
partial aggregates ``compiler.algebra.arrowtiles`` computes per partition).
"""

from __future__ import annotations

import hashlib
from functools import reduce
from typing import Callable, Sequence

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from compiler.algebra.arrowtiles import WRITE_COLUMNS
from compiler.algebra.registry import storage_of
from compiler.algebra.spark import (SPARK, TileForm, encode_tuple_column, exact_long_sum, redis_key_column,
                                    values_json_column)
from compiler.algebra.windows import LEVEL_CODE, levels_s
from compiler.plan import StateSpec
from writer.sources import counted

#: merge ops (``event.lua``) of the rows, by how ``writer.backfill`` writes them
OPS = {
    "I": "set", "F": "set", "FI": "set", "HMS": "set",
    "MIN:i": "set", "MIN:n": "set", "MIN:s": "set", "MAX:i": "set", "MAX:n": "set", "MAX:s": "set",
    "SEEN": "seen", "LA": "latest",
}

#: states per exploding projection: more make one projection's generated
#: code exceed the JVM's 64 KB method limit (Spark then compiles, fails and
#: falls back to interpreting it, slowly)
STRUCTS_PER_PROJECTION = 4

#: columns of :func:`partial_rows`
PARTIAL_COLUMNS = ("g", "rk", "field", "value", "op", "t")


def form(state: StateSpec) -> TileForm | None:
    """Return the tile-pass form of a state (``compiler.algebra.spark.SparkAggregate.tile``), or ``None``
    if this pass does not compute it (write logs, ``Decayed*``: ``writer.tiles``)."""
    if storage_of(state) not in ("tiles", "seen", "latest"):
        return None
    return SPARK[state.function].tile(state.value_types)


#: the write columns of each aggregation group
_SCHEMAS = {
    "num": {"g": "int", "rk": "string", "t": "long", "vi": "long", "vl": "long", "vd": "double"},
    "hll": {"g": "int", "rk": "string", "t": "long", "slot": "int", "rho": "int"},
    "uniq": {"g": "int", "rk": "string", "t": "long", "u": "string"},
    "obj": {"g": "int", "rk": "string", "t": "long", "seq": "long", "vs": "string", "j": "string"},
}


#: the write columns of :func:`batch_write_rows`: ``compiler.algebra.arrowtiles.WRITE_COLUMNS`` as Spark types
_ALL_SCHEMA = {name: {"int32": "int", "int64": "long", "double": "double", "string": "string"}[str(typ)]
               for name, typ in WRITE_COLUMNS.items()}


def _write_struct(st: StateSpec, g: int, ev: str, group: str, counted: Column,
                  names: dict[str, str] | None = None, encoded: Column | None = None) -> Column:
    """One state's write of an ``ev`` event as a struct of ``_SCHEMAS[group]`` (``group`` ``"all"``:
    :data:`_ALL_SCHEMA`, every kind of state), null when not counted.

    ``counted`` is ``writer.sources.counted`` of the event's frame (false for
    a repeated ``_id``); the state's ``where`` and non-null rules come on top.
    ``names``: feature -> column name (``writer.features.batch_features``: a
    frame of several event types; the write then also requires ``_type`` to
    be ``ev``); default ``f_<feature>`` of a frame of ``ev`` events only.
    ``encoded``: the write's key already encoded (``encode_tuple_column`` of
    its key columns); default computed here.
    """
    from compiler.codegen.spark import compile_column

    def col(n: str) -> Column:
        return F.col(names[n] if names is not None else f"f_{n}")

    w = st.writes[ev]
    cond = counted if names is None else (F.col("_type") == F.lit(ev)) & counted
    if w.where is not None:
        cond = cond & F.coalesce(compile_column(w.where, {n: col(n) for n in w.where.refs()},
                                         F.col("_time_ms")), F.lit(False))
    for n in list(w.values) + list(w.keys):
        cond = cond & col(n).isNotNull()
    key = encode_tuple_column([col(k) for k in w.keys], st.key_types) if encoded is None else encoded
    vals = [col(n) for n in w.values]
    cols = {"g": F.lit(g), "rk": redis_key_column(key, len(st.key_types), st.definition_hash),
            "t": F.col("_time_ms"), "seq": F.col("_seq")}
    storage = storage_of(st)
    if storage == "log":
        cols["j"] = values_json_column(len(st.value_types), vals)
    elif storage == "decayed":
        cols["x"] = SPARK[st.function].decay_value(vals)
    else:
        cols.update(SPARK[st.function].write_columns(st.value_types, vals))
    schema = _ALL_SCHEMA if group == "all" else _SCHEMAS[group]
    return F.when(cond, F.struct(*[
        (cols[c] if c in cols else F.lit(None)).cast(tp).alias(c) for c, tp in schema.items()]))


def _with_encoded_keys(frame: DataFrame, writes: Sequence[tuple[StateSpec, str]],
                       column: Callable[[str, str], str]) -> tuple[DataFrame, Callable[[StateSpec, str], Column | None]]:
    """``frame`` plus each distinct entity key's encoding (``encode_tuple_column``, SPEC §5.5) as a column.

    The write structs are evaluated interpreted (they sit under ``filter``,
    which has no generated form); states keyed alike there re-ran the
    escaping once per state. Here each distinct (key columns, key types) is
    encoded once per event, in a projection with generated code (columns
    ``_k<hash of the key columns and types>``; the expressions built once
    per process).

    Args:
        frame: a feature frame.
        writes: the ``(state, event type)`` writes to come.
        column: ``(event type, feature) -> column name`` in ``frame``.

    Returns:
        ``(frame with the _k columns, enc)``: ``enc(state, event type)`` is
        the write's encoded-key column, ``None`` for a global state (no key).
    """
    from writer.session import memo_column

    def sig(st: StateSpec, ev: str) -> tuple:
        return tuple(column(ev, k) for k in st.writes[ev].keys), tuple(st.key_types)

    names: dict[tuple, str] = {}  # named by content: a memoised struct naming one is right in any frame
    for st, ev in writes:
        if st.writes[ev].keys:
            names.setdefault(sig(st, ev), "_k" + hashlib.sha1(repr(sig(st, ev)).encode()).hexdigest()[:16])
    frame = frame.select("*", *[memo_column(("tilepass-key", s), lambda s=s: encode_tuple_column(
        [F.col(c) for c in s[0]], s[1])).alias(name) for s, name in names.items()])
    return frame, lambda st, ev: F.col(names[sig(st, ev)]) if st.writes[ev].keys else None


def _write_structs(frames: dict[str, DataFrame], states: Sequence[StateSpec], group: str,
                   per_projection: int = STRUCTS_PER_PROJECTION) -> DataFrame | None:
    """Step 1: one row per counted write of every state of ``group`` (columns ``_SCHEMAS[group]``;
    ``"all"``: every state, columns :data:`_ALL_SCHEMA`).

    The struct expressions are built once per process (``writer.session.memo_column``).
    """
    from writer.session import memo_column

    parts = []
    for ev in sorted(frames):
        mine = [(g, st) for g, st in enumerate(states)
                if (group == "all" or (form(st) is not None and form(st).group == group)) and ev in st.writes]
        repeats = "_repeat" in frames[ev].columns  # the condition's tree differs: part of the memo key
        for i in range(0, len(mine), per_projection):
            chunk = mine[i:i + per_projection]
            key = ("tilepass", group, ev, repeats, tuple((g, repr(st)) for g, st in chunk))
            arr = memo_column(key, lambda chunk=chunk, ev=ev: F.array(
                *[_write_struct(st, g, ev, group, counted(frames[ev])) for g, st in chunk]))
            # the counted writes' structs as rows, in one step (each step re-analyses the wide plan)
            parts.append(frames[ev].select(F.inline(F.filter(arr, lambda w: w.isNotNull()))))
    return reduce(DataFrame.unionByName, parts) if parts else None


def _sql(v) -> str:
    """A SQL literal of a str or int constant."""
    if isinstance(v, str):
        return "'" + v.replace("\\", "\\\\").replace("'", "\\'") + "'"
    return str(int(v))


def _by_state(states: Sequence[StateSpec], value: Callable[[StateSpec], object], raw: bool = False) -> Column:
    """``element_at(map(g -> value(state)), g)``: a per-state constant as a column (one SQL expression:
    a py4j call per literal costs more than planning the job)."""
    pairs = [f"{g}, {v if raw else _sql(v)}" for g, st in enumerate(states) if (v := value(st)) is not None]
    return F.expr(f"element_at(map({', '.join(pairs)}), g)") if pairs else F.lit(None)


def _span_ms(st: StateSpec) -> int:
    """``W + r`` in ms: how long a state's tile or value stays readable (SPEC §5.3)."""
    return st.window_s * 1000 + st.resolution_s * 1000


def _leveled(writes: DataFrame, states: Sequence[StateSpec], time_range: tuple[int | None, int | None],
             read_from_ms: int | None = None) -> DataFrame:
    """Step 2: each write once per stored tile size (``size`` s, ``tile`` index; size 0: untiled).

    With ``read_from_ms``, only tiles ending after ``read_from_ms - W - r``
    (untiled: writes after it) are kept.
    """
    sizes = _by_state(states, lambda st: None if form(st) is None else "array(" + ", ".join(
        f"{s}L" for s in (levels_s(st.window_s) if form(st).tiled else (0,))) + ")", raw=True)
    lo, hi = time_range
    if lo is not None:
        writes = writes.where(F.col("t") >= F.lit(lo))
    if hi is not None:
        writes = writes.where(F.col("t") < F.lit(hi))
    if read_from_ms is not None:
        # a write at t lands in tiles ending at most t + (coarsest size) later
        reach = _by_state(states, lambda st: None if form(st) is None else
                          read_from_ms - _span_ms(st) - (max(levels_s(st.window_s)) * 1000 if form(st).tiled else 0))
        writes = writes.where(F.col("t") > reach)
    out = writes.select("*", F.explode(sizes).alias("size"))
    tile = F.when(F.col("size") > 0, F.floor(F.col("t") / (F.col("size") * F.lit(1000)))).otherwise(F.lit(0))
    out = out.withColumn("tile", tile.cast("long"))
    if read_from_ms is not None:
        cutoff = _by_state(states, lambda st: None if form(st) is None else read_from_ms - _span_ms(st))
        end = F.when(F.col("size") > 0, (F.col("tile") + 1) * F.col("size") * F.lit(1000)).otherwise(F.col("t"))
        out = out.where(end > cutoff)
    return out


def _fields(agg: DataFrame, states: Sequence[StateSpec], group: str) -> DataFrame:
    """Step 4: the aggregated groups of ``group`` as rows ``PARTIAL_COLUMNS`` (one per stored component)."""
    codes = ", ".join(f"{s}L, '{c}'" for s, c in LEVEL_CODE.items())
    tile_field = F.expr(f"concat(element_at(map({codes}), size), cast(tile as string))")
    width = max((len(form(st).components) for st in states if form(st) is not None and form(st).group == group),
                default=1)
    comps = []
    for k in range(width):
        suffix = _by_state(states, lambda st: _component(st, group, k, 0))
        op = _by_state(states, lambda st: _component(st, group, k, 1))
        name = _by_state(states, lambda st: _component(st, group, k, 2))
        value = F.lit(None).cast("string")
        for col in sorted({c[2] for st in states if form(st) is not None and form(st).group == group
                           for c in form(st).components[k:k + 1]}):
            value = F.when(name == F.lit(col), F.col(col).cast("string")).otherwise(value)
        if group == "uniq":
            field = F.concat(F.lit("u"), F.col("u"))
        elif group == "obj":
            field = F.when(op == F.lit("LA"), F.lit("lt")).otherwise(F.concat(tile_field, suffix))
        else:
            field = F.concat(tile_field, suffix)
        comps.append(F.when(op.isNotNull(), F.struct(field.alias("field"), value.alias("value"), op.alias("op"))))
    if width == 1:  # one component per group: no explode
        return agg.select("g", "rk", comps[0].getField("field").alias("field"), comps[0].getField("value").alias("value"),
                          comps[0].getField("op").alias("op"), "t")
    out = agg.select("g", "rk", "t", F.explode(F.array(*comps)).alias("c"))
    return out.where(F.col("c").isNotNull()).select("g", "rk", "c.field", "c.value", "c.op", "t")


def _component(st: StateSpec, group: str, k: int, part: int):
    f = form(st)
    if f is None or f.group != group or k >= len(f.components):
        return None
    return f.components[k][part]


def partial_rows(frames: dict[str, DataFrame], states: Sequence[StateSpec],
                 time_range: tuple[int | None, int | None] = (None, None),
                 read_from_ms: int | None = None, key_partitions: int | None = None,
                 finish: Callable[[DataFrame], DataFrame] | None = None) -> DataFrame | None:
    """Return every merged-tile state's partial aggregates of the writes in ``frames``.

    Args:
        frames: ``writer.tiles.feature_frames`` output (``_time_ms``, ``_seq``,
            ``f_<feature>`` per writer event type).
        states: the states; those :func:`form` gives ``None`` are left out
            (the caller computes them with ``writer.tiles``). ``g`` in the
            output indexes this sequence.
        time_range: ``[lo, hi)`` event times (ms) of the writes counted
            (``None``: unbounded).
        read_from_ms: only what a read at or after this time can use (ms;
            ``None``: everything): tiles ending after ``read_from_ms - W - r``
            and untiled values written after it (SPEC §5.3). Filtered before
            aggregating, on the grouping keys, so older tiles cost nothing.
        key_partitions: hash-partition the writes by ``rk`` into this many
            partitions before aggregating: the aggregations then need no
            other shuffle, and all rows of a key stay in one partition (what a
            per-key ``finish`` or sink needs). ``None``: Spark's own
            exchange after a partial aggregation.
        finish: applied to each aggregation group's rows before they are
            unioned (a per-key ``groupBy`` there reuses ``key_partitions``;
            after the union Spark would shuffle again).

    Returns:
        Columns :data:`PARTIAL_COLUMNS`: ``g`` (state index), ``rk``,
        ``field``, ``value`` (stored text), ``op`` (``event.lua`` merge op),
        ``t`` (latest write time in the group, ms); ``None`` when no state
        has a form here.

    Raises:
        NotImplementedError: a function without a form.
    """
    out = []
    keys = ["g", "rk", "size", "tile"]
    for group in _SCHEMAS:
        writes = _write_structs(frames, states, group)
        if writes is None:
            continue
        if key_partitions is not None:
            writes = writes.repartition(key_partitions, "rk")
        lv = _leveled(writes, states, time_range, read_from_ms)
        if group == "num":
            agg = lv.groupBy(*keys).agg(
                F.count(F.lit(1)).alias("n"), F.sum(F.shiftright("vi", 32)).alias("slh"),
                F.sum(F.col("vi").bitwiseAND(F.lit(0xFFFFFFFF))).alias("sll"), F.sum("vd").alias("sd"),
                F.min("vl").alias("mnl"), F.max("vl").alias("mxl"), F.min("vd").alias("mnd"),
                F.max("vd").alias("mxd"), F.max("t").alias("t"))
            agg = agg.withColumn("sl", exact_long_sum(F.col("slh"), F.col("sll"))).drop("slh", "sll")
        elif group == "hll":
            slots = lv.groupBy(*keys, "slot").agg(F.max("rho").alias("rho"), F.max("t").alias("t"))
            entry = F.concat(F.lit(";"), F.col("slot").cast("string"), F.lit(":"), F.col("rho").cast("string"))
            agg = slots.groupBy(*keys).agg(F.concat_ws("", F.array_sort(F.collect_list(entry))).alias("hms"),
                                           F.max("t").alias("t"))
        elif group == "uniq":
            agg = lv.groupBy(*keys, "u").agg(F.max("t").alias("t"))
            agg = agg.withColumn("seen", F.col("t").cast("string"))
        else:
            tj = F.struct(F.col("t"), F.col("j"))
            order = F.struct(F.col("t"), F.col("seq"))
            agg = lv.groupBy(*keys).agg(
                F.min("vs").alias("mns"), F.max("vs").alias("mxs"),
                F.min_by(tj, order).alias("first"), F.max_by(tj, order).alias("last"), F.max("t").alias("t"))
            agg = agg.select(
                "*",
                F.concat(F.col("first.t").cast("string"), F.lit("\t"), F.col("first.j")).alias("fi"),
                F.concat(F.col("last.t").cast("string"), F.lit("\t"), F.col("last.j")).alias("la"))
        rows = _fields(agg, states, group)
        out.append(finish(rows) if finish is not None else rows)
    return reduce(DataFrame.unionByName, out) if out else None


def state_rows_all(frames: dict[str, DataFrame], states: Sequence[StateSpec], start_ms: int,
                   end_ms: int, key_partitions: int) -> DataFrame | None:
    """Every merged-tile state's store image for a backfill, one row per key (``writer.sink.write_keys``).

    The fields ``writer.tiles.state_rows`` gives each such state, in one
    pass: writes in ``[start_ms, end_ms)``, only what a read at or after
    ``end_ms`` can use (a tile or value whose end is after
    ``end_ms - W - r``, SPEC §5.3), tiles as ``set``, ``CountUnique`` as
    ``seen`` and ``Latest*`` as ``latest``, expiring ``W + r`` ms after the
    store's clock (the sink's ``PEXPIRE``). A key's fields are gathered in
    Spark (no extra shuffle: the writes are partitioned by key first), so
    the sink sends one command per key, not one per field.

    Args:
        frames: ``writer.tiles.feature_frames`` output.
        states: the states; only those with a :func:`form` are computed.
        start_ms: start of the (widened) run window, epoch ms.
        end_ms: its end (exclusive), epoch ms.
        key_partitions: partitions of the output (and of the shuffle).

    Returns:
        Columns ``g`` (the state's index in ``states``), ``rk``, ``mode``,
        ``ttl_ms`` and ``kv`` (``[field, value, field, value, ..]``);
        ``None`` when no state has a form.
    """
    span = _by_state(states, lambda st: _span_ms(st) if form(st) else None)
    modes = ", ".join(f"'{op}', '{mode}'" for op, mode in OPS.items())
    mode = F.expr(f"element_at(map({modes}), op)")

    def per_key(rows: DataFrame) -> DataFrame:
        return rows.groupBy("g", "rk", mode.alias("mode")).agg(
            F.flatten(F.collect_list(F.array("field", "value"))).alias("kv")
        ).select("g", "rk", "mode", span.cast("long").alias("ttl_ms"), "kv")

    return partial_rows(frames, states, (start_ms, end_ms), read_from_ms=end_ms,
                        key_partitions=key_partitions, finish=per_key)


def tile_specs(states: Sequence[StateSpec]) -> list:
    """Per state, its ``compiler.algebra.arrowtiles.TileSpec`` (what the Arrow target needs, as plain data).

    Args:
        states: the states; the result is indexed like them (``g``).

    Returns:
        A list of ``TileSpec``: storage kind, the Spark target's tile form
        (group, components), the stored sizes (``levels_s``, ``(0,)``
        untiled), the write log's ``n`` and ``W`` in ms.
    """
    from compiler.algebra.arrowtiles import TileSpec

    out = []
    for st in states:
        f = form(st)
        sizes = (levels_s(st.window_s) if f.tiled else (0,)) if f is not None else (0,)
        out.append(TileSpec(storage_of(st), f.group if f is not None else None, tuple(sizes),
                            tuple(f.components) if f is not None else (), st.limit, st.window_s * 1000))
    return out


def batch_write_rows(frame: DataFrame, names: dict[str, dict[str, str]], states: Sequence[StateSpec],
                     partitions: int) -> DataFrame | None:
    """Every state's counted writes of a stream micro-batch, from ONE frame of every writer event type.

    The frame is ``writer.features.batch_features`` output. The same write
    rules as :func:`partial_rows` (``counted``, ``where``, non-null values
    and key components, SPEC §2.4), each state's write of an event type also
    requiring the row's ``_type`` to be it, computed without whole-stage
    codegen (``writer.session.without_codegen``: a generated method over
    this many structs would exceed the JVM's 64 KB limit), each distinct
    entity key encoded once per event before them (:func:`_with_encoded_keys`); all
    writes of every event type come from one exploding projection (no union
    of a projection per type: fewer DataFrame steps to analyse, and the
    batch's events are read once), then one shuffle by ``rk``.

    Args:
        frame: ``batch_features`` output (``_type``, ``_time_ms``, ``_seq``,
            optional ``_repeat``, the feature columns).
        names: ``batch_features``' event type -> feature -> column name; it
            must hold every writer event type of ``states``.
        states: the states written (``g`` indexes them).
        partitions: partitions of the shuffle (the cores).

    Returns:
        Columns :data:`_ALL_SCHEMA` (``compiler.algebra.arrowtiles.WRITE_COLUMNS``):
        ``g``, ``rk``, ``t`` (ms), ``seq``, and per kind of state its write's
        columns (tile forms: ``SparkAggregate.write_columns``; write logs:
        ``j``, the values' JSON; ``Decayed*``: ``x``, the decayed value), the
        others null. All rows of a key in one partition. ``None`` when no
        state has a writer.

    Raises:
        KeyError: a writer event type or feature missing from ``names``.
    """
    from writer.session import memo_column

    mine = [(g, st, ev) for g, st in enumerate(states) for ev in sorted(st.writes)]
    if not mine:
        return None
    repeats = "_repeat" in frame.columns
    cols = {ev: names[ev] for _g, _st, ev in mine}
    key = ("tilepass-batch", repeats, tuple((g, ev, repr(st)) for g, st, ev in mine),
           tuple(sorted((ev, tuple(sorted(c.items()))) for ev, c in cols.items())))
    frame, enc = _with_encoded_keys(frame, [(st, ev) for _g, st, ev in mine], lambda ev, n: cols[ev][n])
    arr = memo_column(key, lambda: F.array(*[_write_struct(st, g, ev, "all", counted(frame), cols[ev], enc(st, ev))
                                             for g, st, ev in mine]))
    writes = frame.select(F.inline(F.filter(arr, lambda w: w.isNotNull())))
    return writes.repartition(partitions, "rk")
