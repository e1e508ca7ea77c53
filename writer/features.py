"""Feature columns of one event type, generated from the plan (SPEC §5.10).

Inputs come from ``compiler.typesystem.input_column`` over the raw JSON text,
scalars from ``compiler.codegen.spark.compile_column``; both are Spark
built-in column expressions (no Python UDF).
"""

from __future__ import annotations

from typing import Iterable

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from compiler.codegen.spark import compile_column
from compiler.plan import EventPlan
from compiler.typesystem import input_column


class StagedFeatureError(NotImplementedError):
    """A write needs the value of an aggregate (a dependency stage, SPEC §5.6).

    Backfill of such states is not implemented yet; the message names them.
    """


def needed_features(event: EventPlan, names: Iterable[str]) -> list[str]:
    """Return ``names`` and their transitive dependencies, in plan order.

    Raises:
        StagedFeatureError: one of them is an aggregate.
    """
    feats = {f.name: f for f in event.features}
    need: set[str] = set()
    stack = list(names)
    while stack:
        n = stack.pop()
        if n in need:
            continue
        need.add(n)
        f = feats[n]
        if f.kind == "aggregate":
            raise StagedFeatureError(
                f"event {event.name}: feature {n} is an aggregate, and a state write depends on it; "
                "backfill of aggregates over aggregates (dependency stages) is not implemented yet"
            )
        stack.extend(d for d in f.deps if d in feats)
    return [f.name for f in event.features if f.name in need]


def with_features(df: DataFrame, event: EventPlan, names: Iterable[str]) -> DataFrame:
    """Add one column per needed feature to the raw events of ``event``.

    Args:
        df: raw events of this type (``_time_ms``, ``_seq``, ``_raw`` columns).
        event: the event's plan.
        names: features required (their dependencies are added too).

    Returns:
        ``df`` with columns named ``f_<feature>`` (prefix avoids clashes with
        ``_time_ms`` etc.).

    Raises:
        StagedFeatureError: see :func:`needed_features`.
    """
    cols: dict[str, Column] = {}
    feats = {f.name: f for f in event.features}
    t = F.col("_time_ms")
    needed = needed_features(event, names)
    # parse each event's JSON once for all of its inputs
    df = df.withColumn("_v", F.try_parse_json(F.col("_raw")))
    for n in needed:
        f = feats[n]
        if f.kind == "input":
            col = input_column(F.col("_v"), f.input, f.type, parsed=True)
        else:
            col = compile_column(f.expr, cols, t)
        df = df.withColumn(f"f_{n}", col)
        cols[n] = F.col(f"f_{n}")
    return df.drop("_v")
