"""Value comparison shared by the conformance tests (floats within 1e-9 relative, SPEC §3.3)."""

from __future__ import annotations

import math
from typing import Any, Callable


def same(actual: Any, expected: Any) -> bool:
    """Whether ``actual`` equals ``expected`` with the same run-time type (bool is not int).

    Structs (``dict``; a Spark ``Row``) and arrays/tuples (``list``; a Spark
    ``Row`` for a tuple) compare item by item.
    """
    if expected is None or actual is None:
        return expected is None and actual is None
    if isinstance(expected, bool) or isinstance(actual, bool):
        return actual is expected
    if isinstance(expected, dict):
        # a struct: a dict in Python, a Row in Spark
        if hasattr(actual, "asDict"):
            actual = actual.asDict()
        return isinstance(actual, dict) and list(actual) == list(expected) and all(
            same(actual[k], expected[k]) for k in expected)
    if isinstance(expected, list):
        # an array (list) or a tuple (list in Python, a Row read by position in Spark)
        return isinstance(actual, (list, tuple)) and len(actual) == len(expected) and all(
            same(a, x) for a, x in zip(actual, expected))
    if isinstance(expected, float):
        if not isinstance(actual, float):
            return False
        if math.isinf(expected) or math.isinf(actual):
            return actual == expected
        return actual == expected or abs(actual - expected) <= 1e-9 * max(abs(actual), abs(expected))
    return type(actual) is type(expected) and actual == expected


def grouped_columns(keys: list, build: Callable[[Any], tuple]) -> tuple[list, dict[int, int]]:
    """Columns evaluating each distinct key once over a ``_row``-numbered DataFrame.

    Args:
        keys: one hashable key per row (row ``k`` has ``_row == k``).
        build: ``key -> (value Column, error Column)``.

    Returns:
        ``(columns, slot_of)``: ``_row`` plus ``v<u>``/``e<u>`` per distinct
        key (null outside that key's rows), and each row's slot ``u``. Identical
        expressions are compiled once, which keeps Spark's plans small.
    """
    from pyspark.sql import functions as F

    groups: dict = {}
    for k, key in enumerate(keys):
        groups.setdefault(key, []).append(k)
    out, slot_of = [F.col("_row")], {}
    for u, (key, ks) in enumerate(groups.items()):
        value, err = build(key)
        mine = F.col("_row").isin(ks)
        out += [F.when(mine, value).alias(f"v{u}"), F.when(mine, err).alias(f"e{u}")]
        slot_of.update({k: u for k in ks})
    return out, slot_of
