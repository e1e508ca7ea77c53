"""Feature columns of one event type, generated from the plan (SPEC §5.10).

Inputs come from ``compiler.typesystem.input_column`` over the raw JSON text,
scalars from ``compiler.codegen.spark.compile_column``; both are Spark
built-in column expressions (no Python UDF). Aggregates (a write that
depends on an aggregate: a dependency stage, SPEC §5.6) come from
``writer.pointintime``, joined on ``_seq``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from compiler.codegen.spark import compile_column
from compiler.plan import EventPlan
from compiler.typesystem import input_column
from writer.session import memo_column

if TYPE_CHECKING:  # pragma: no cover
    from writer.pointintime import PointInTime


class StagedFeatureError(NotImplementedError):
    """A feature needs aggregate values that cannot be staged (SPEC §5.6).

    Raised when an aggregate is needed but no point-in-time source of history
    was given (:func:`with_features` without ``staged``), and by
    ``writer.pointintime`` for aggregates that depend on each other across
    event types (no dependency stage exists). The message names the features.
    """


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
        df = df.withColumn("_v", F.try_parse_json(F.col("_raw")))
        df = df.withColumns({
            f"f_{n}": memo_column(("input", repr(feats[n].input), feats[n].type),
                                  lambda f=feats[n]: input_column(F.col("_v"), f.input, f.type, parsed=True))
            for n in inputs})
        for n in inputs:
            cols[n] = F.col(f"f_{n}")
        df = df.drop("_v")
    if aggregates:
        # all of them in one frame (one join per dependency stage, PointInTime.values_many)
        df = df.join(staged.values_many(event.name, aggregates), "_seq", "left")
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
