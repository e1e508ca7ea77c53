"""Feature columns of one event type, generated from the plan (SPEC §5.10).

Inputs come from ``compiler.typesystem.input_column`` over the raw JSON text,
scalars from ``compiler.codegen.spark.compile_column``; both are Spark
built-in column expressions (no Python UDF). Aggregates (a write that
depends on an aggregate: a dependency stage, SPEC §5.6) come from
``writer.pointintime``, joined on ``_seq``.
"""

from __future__ import annotations

import hashlib
from typing import TYPE_CHECKING, Iterable, Mapping

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from compiler.codegen.spark import compile_column
from compiler.plan import EventPlan, Feature, InputSpec, Plan
from compiler.typesystem import input_column, variant_token
from writer.session import configure, memo_column
from writer.sources import seq_join_keys

if TYPE_CHECKING:  # pragma: no cover
    from writer.pointintime import PointInTime


class StagedFeatureError(NotImplementedError):
    """A feature needs aggregate values that cannot be staged (SPEC §5.6).

    Raised when an aggregate is needed but no point-in-time source of history
    was given (:func:`with_features` without ``staged``), and by
    ``writer.pointintime`` for aggregates that depend on each other across
    event types (no dependency stage exists). The message names the features.
    """


def _by_field(f: Feature) -> bool:
    """Whether input ``f`` reads a top-level field of the payload first (its path starts with a key)."""
    return bool(f.input.path) and isinstance(f.input.path[0], str)


def _ddl_name(name: str) -> str:
    """``name`` as a field name of a Spark DDL type string (backquoted, backquotes doubled)."""
    return "`" + name.replace("`", "``") + "`"


def _token_name(path: tuple[str | int, ...], part: int) -> str:
    """The column of an input path's token kind (``part`` 0) or text (1) in :func:`input_columns`, named
    after the path (memoised columns refer to it by name)."""
    return f"_tok{part}_{hashlib.sha1(repr(path).encode()).hexdigest()[:16]}"


def input_columns(df: DataFrame, keep: list[str], inputs: Mapping[str, Feature]) -> DataFrame:
    """``df`` reduced to ``keep`` plus one column per input feature, each event's JSON ``_raw`` parsed once.

    The payload is parsed once (``try_parse_json``, a VARIANT; a key
    repeated in an object reads as its last value, as the API's orjson reads
    it: :func:`writer.session.configure` sets that on the session first, for
    good; malformed JSON is a null payload, every input missing) and, in the
    same projection, its top-level fields that some input
    starts its path with are taken out in one pass over the object:
    ``try_variant_get(payload, '$', 'struct<k1 variant, ..>')`` finds
    each field once (by exact, case-sensitive key), where a path lookup per
    input decodes the object's keys one by one, twice per input (kind and
    text). The next projection takes each input path's token, its kind
    and text (``compiler.typesystem.variant_token``), from its field, or,
    for a path that starts with an array index, from the parsed payload by
    the whole path; each input reads them (``compiler.typesystem.input_column``
    with ``token``). A missing field, a payload that is not an object and
    malformed JSON are all a null field, read as missing, as a lookup by
    the whole path reads them.

    Args:
        df: a frame with ``_raw`` (the event's JSON text).
        keep: the columns of ``df`` to keep, in order (``_raw`` may be one).
        inputs: output column name -> input feature (``kind == "input"``).

    Returns:
        ``df.select(*keep, *inputs)``: values typed as ``input_column`` types them.

    Source: SPEC §2.2 (inputs read from the event's JSON as the API reads it).
    """
    configure(df.sparkSession)
    firsts = sorted({f.input.path[0] for f in inputs.values() if _by_field(f)})
    out = list(keep)
    parsed = F.try_parse_json(F.col("_raw"))
    # the raw text stays to the last projection: a JSON -0.0 reads its sign from it (the parse stores 0)
    keep = keep if "_raw" in keep else [*keep, "_raw"]
    if not all(_by_field(f) for f in inputs.values()):
        # an input by array index reads the whole parse: parse in one projection, take the fields in the next
        df = df.select(*keep, parsed.alias("_v"))
        keep, parsed = [*keep, "_v"], F.col("_v")
    if firsts:
        struct = "struct<" + ", ".join(f"{_ddl_name(k)} variant" for k in firsts) + ">"
        df = df.select(*keep, F.try_variant_get(parsed, "$", struct).alias("_s"))

    def token(p: tuple[str | int, ...]) -> tuple[Column, Column]:
        # a path by field from its field (taken out above), one by array index from the whole parse
        if p and isinstance(p[0], str):
            return variant_token(F.col("_s").getField(p[0]), p[1:])
        return variant_token(F.col("_v"), p)

    # each path's token kind and text in a projection of their own (compiler.typesystem.variant_token):
    # the input rules read the text several times, and Spark keeps a projection whose outputs are used
    # more than once and are not cheap (CollapseProject) rather than copy them into each use
    paths = sorted({f.input.path for f in inputs.values()}, key=repr)
    tokens = [memo_column(("input-token", repr(p)), lambda p=p: token(p)) for p in paths]
    df = df.select(*keep, *[c.alias(_token_name(p, i)) for p, kt in zip(paths, tokens) for i, c in enumerate(kt)])
    raw = F.col("_raw")

    def column(f: Feature) -> Column:
        p = f.input.path
        return memo_column(("input", repr(f.input), f.type),
                           lambda: input_column(None, f.input, f.type, raw_text=raw,
                                                token=(F.col(_token_name(p, 0)), F.col(_token_name(p, 1)))))

    return df.select(*out, *[column(f).alias(name) for name, f in inputs.items()])


def needed_features(event: EventPlan, names: Iterable[str], known: Iterable[str] = ()) -> list[str]:
    """Return ``names`` and their transitive dependencies, in plan order.

    Aggregates are returned but their own dependencies are not followed:
    their values come from ``writer.pointintime``, which computes what it
    needs (read keys, ``after``, the writers' keys/values/filters) itself.

    Args:
        event: the event's plan.
        names: feature names of ``event``.
        known: features already available: neither returned nor followed.

    Returns:
        Feature names in plan (dependency) order.

    Raises:
        KeyError: an unknown feature name.

    Source: SPEC §2.1 (dependency order), §2.4, §5.6 (dependency stages).
    """
    feats = {f.name: f for f in event.features}
    need: set[str] = set()
    skip = set(known)
    stack = list(names)
    while stack:
        n = stack.pop()
        if n in need or n in skip:
            continue
        need.add(n)
        f = feats[n]
        if f.kind != "aggregate":
            stack.extend(d for d in f.deps if d in feats)
    return [f.name for f in event.features if f.name in need]


def with_features(
    df: DataFrame, event: EventPlan, names: Iterable[str], staged: PointInTime | None = None
) -> DataFrame:
    """Add one column per needed feature to the raw events of ``event``.

    Inputs and scalars are column expressions; an aggregate (a dependency
    stage, SPEC §5.6) is the value it had when the event was processed online
    (SPEC §2.4, §3.3), from ``staged.values_many`` joined on ``_seq`` (one
    frame for all of them).

    Args:
        df: raw events of this type (``_time_ms``, ``_seq``, ``_raw`` columns);
            a feature whose ``f_<feature>`` column is already there is kept
            as is (``_raw`` is then only needed for the missing inputs).
        event: the event's plan.
        names: features required (their dependencies are added too).
        staged: point-in-time values over the full history
            (``writer.pointintime.PointInTime``); needed only if an aggregate
            is among the features.

    Returns:
        ``df`` with columns named ``f_<feature>`` (prefix avoids clashes with
        ``_time_ms`` etc.): time ``bigint`` ms, duration ``double`` s, int
        ``bigint``, float ``double``; aggregates per
        ``compiler.codegen.spark.spark_ddl``.

    Raises:
        StagedFeatureError: an aggregate is needed and ``staged`` is ``None``,
            or ``staged`` raises it (cross-event cycle).
        compiler.codegen.UnsupportedError: a scalar Spark cannot express.
    """
    cols: dict[str, Column] = {}
    feats = {f.name: f for f in event.features}
    t = F.col("_time_ms")
    present = set(df.columns)
    for n in event.features:
        if f"f_{n.name}" in present:
            cols[n.name] = F.col(f"f_{n.name}")
    needed = needed_features(event, names, known=cols)
    aggregates = [n for n in needed if feats[n].kind == "aggregate"]
    if aggregates and staged is None:
        raise StagedFeatureError(
            f"event {event.name}: {', '.join(aggregates)} "
            f"{'is an aggregate' if len(aggregates) == 1 else 'are aggregates'}: the value an aggregate had "
            "when each event was processed needs the event history (pass staged=writer.pointintime.PointInTime(...))"
        )
    # inputs first, parsing each event's JSON once for all of them (in one
    # projection; the column trees are built once per process, memo_column)
    inputs = [n for n in needed if feats[n].kind == "input"]
    if inputs:
        df = input_columns(df, df.columns, {f"f_{n}": feats[n] for n in inputs})
        for n in inputs:
            cols[n] = F.col(f"f_{n}")
    if aggregates:
        # all of them in one frame (one join per dependency stage, PointInTime.values_many)
        values = staged.values_many(event.name, aggregates)
        df = df.join(values, seq_join_keys(df, values), "left")
    for n in needed:
        if feats[n].kind in ("input", "aggregate"):
            cols[n] = F.col(f"f_{n}")
    # scalars in waves: each wave the scalars whose features are all there, added in one
    # projection (every DataFrame step re-analyses the whole, wide plan: one per wave, not
    # one per scalar)
    pending = [n for n in needed if n not in cols]
    while pending:
        wave = [n for n in pending if all(d in cols or d not in feats for d in feats[n].deps)]
        if not wave:  # pragma: no cover - the plan is in dependency order
            raise ValueError(f"event {event.name}: cannot order the features {pending}")
        # a scalar's refs are the columns f_<name> (cols), so the tree depends on the expression only
        df = df.withColumns({f"f_{n}": memo_column(("scalar", repr(feats[n].expr)),
                                                   lambda f=feats[n]: compile_column(f.expr, cols, t))
                             for n in wave})
        for n in wave:
            cols[n] = F.col(f"f_{n}")
        pending = [n for n in pending if n not in cols]
    return df


def batch_features(df: DataFrame, plan: Plan, needs: Mapping[str, Iterable[str]]
                   ) -> tuple[DataFrame, dict[str, dict[str, str]]]:
    """Add the needed features of every event type to ONE frame of raw events of several types.

    :func:`with_features` works on one event type's frame; a stream
    micro-batch needs the features of each writer event type, and each
    DataFrame step re-analyses the growing plan (per type: a filter, the
    JSON parse, the inputs, each scalar wave, then a union of the types),
    ~35 steps per batch for the demo topology. Here every event type's
    features are columns of the same frame, in one step for the parse, one
    for all inputs and one per scalar wave. Each distinct input (path,
    optionality, default and type) is one column shared by every event type
    reading it; it is computed for every row (an input another type's event
    lacks is null there, and no write of another type reads it). A scalar is
    computed for the rows of its own type only (null elsewhere). Values are
    those of :func:`with_features` (same column expressions).

    Args:
        df: raw events (``_type``, ``_time_ms``, ``_raw``, and carried columns
            such as ``_seq``, ``_repeat``); the rows of other types are kept.
        plan: the plan (``plan.events``).
        needs: event type -> feature names needed (dependencies are added).

    Returns:
        ``(frame, names)``: ``frame`` is ``df`` without ``_raw``, plus one
        column per computed feature, named ``_f<k>`` (``k`` a number);
        ``names[event type][feature] = column name`` for every needed feature
        and dependency (types as in :func:`with_features`).

    Raises:
        StagedFeatureError: a needed feature is an aggregate (this frame has
            no history to stage it from).
        compiler.codegen.UnsupportedError: a scalar Spark cannot express.
    """
    t = F.col("_time_ms")
    names: dict[str, dict[str, str]] = {}
    inputs: dict[tuple, tuple[str, object]] = {}  # memo key -> (column name, feature)
    scalars: dict[str, list] = {}  # event type -> its needed scalar features, in plan order
    known: dict[str, set[str]] = {}  # event type -> its feature names
    for ev in sorted(needs):
        event = plan.events[ev]
        feats = {f.name: f for f in event.features}
        known[ev] = set(feats)
        needed = needed_features(event, needs[ev])
        aggregates = [n for n in needed if feats[n].kind == "aggregate"]
        if aggregates:
            raise StagedFeatureError(f"event {ev}: {', '.join(aggregates)}: aggregates cannot be computed from "
                                     "one batch of events (no history to stage them from)")
        mine = names.setdefault(ev, {})
        for n in needed:
            f = feats[n]
            if f.kind == "input":
                key = ("input", repr(f.input), f.type)
                if key not in inputs:
                    inputs[key] = (f"_f{len(inputs)}", f)
                mine[n] = inputs[key][0]
        scalars[ev] = [feats[n] for n in needed if feats[n].kind != "input"]
    carried = [c for c in df.columns if c != "_raw"]
    if inputs:
        # the JSON parsed once per event, for every input of every type, in one projection
        df = input_columns(df, carried, {name: f for name, f in inputs.values()})
    else:
        df = df.select(*carried)
    # scalars in waves, all event types together: each wave the scalars whose features are all there
    k = len(inputs)
    pending = [(ev, f) for ev in sorted(scalars) for f in scalars[ev]]
    while pending:
        wave = [(ev, f) for ev, f in pending
                if all(d in names[ev] or d not in known[ev] for d in f.deps)]
        if not wave:  # pragma: no cover - the plan is in dependency order
            raise ValueError(f"cannot order the features {[(ev, f.name) for ev, f in pending]}")
        cols = {}
        for ev, f in wave:
            refs = tuple(sorted((d, names[ev][d]) for d in f.deps if d in names[ev]))
            # the tree depends on the expression, its refs' column names and the event type
            cols[f"_f{k}"] = memo_column(
                ("batch-scalar", ev, repr(f.expr), refs),
                lambda ev=ev, f=f, refs=refs: F.when(F.col("_type") == F.lit(ev), compile_column(
                    f.expr, {d: F.col(c) for d, c in refs}, t)))
            k += 1
        df = df.withColumns(cols)
        for (ev, f), name in zip(wave, cols):
            names[ev][f.name] = name
        pending = [(ev, f) for ev, f in pending if f.name not in names[ev]]
    return df, names
