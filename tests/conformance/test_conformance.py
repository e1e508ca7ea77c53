"""Every row of the conformance table through the Python and the Spark engine (SPEC §5.10).

The Spark run is one DataFrame for the whole table: one row per table row
(features as typed columns) and, per distinct expression, a value column and
the engine's error-flag column, each guarded by the ids of its rows. It runs with ANSI mode on (the
Spark 4 default) and off: the generated columns must not depend on it.
"""

from __future__ import annotations

import pytest

from compiler.codegen.python import EvalError, compile_expr
from tests.conformance.compare import same
from tests.conformance.table import ERROR, FEATURES, SPARK_LAYOUT, T0, TABLE

IDS = [row[0] for row in TABLE]


def test_ids_unique():
    assert len(IDS) == len(set(IDS))


def _run_python(expr, env):
    fn = compile_expr(expr)
    values = {k: v for k, v in env.items() if k != "_t"}
    try:
        return fn(values, env.get("_t", T0))
    except EvalError:
        return ERROR


@pytest.mark.parametrize("row", TABLE, ids=IDS)
def test_python(row):
    _id, expr, env, expected = row
    actual = _run_python(expr, env)
    if expected == ERROR:
        assert actual == ERROR, f"expected an error, got {actual!r}"
    else:
        assert actual != ERROR, "unexpected EvalError"
        assert same(actual, expected), f"{actual!r} != {expected!r}"


@pytest.fixture(scope="module")
def spark_query(spark):
    """The whole table as one DataFrame query: a row per table row, a column pair per distinct expression."""
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructField, StructType, _parse_datatype_string

    from compiler.codegen.spark import compile_column_with_error, spark_ddl

    names = list(FEATURES)
    schema = StructType(
        [StructField("_row", _parse_datatype_string("bigint")), StructField("_t", _parse_datatype_string("bigint"))]
        + [StructField(n, _parse_datatype_string(SPARK_LAYOUT.get(n) or spark_ddl(FEATURES[n]))) for n in names]
    )
    rows = [
        (k, env.get("_t", T0), *[env.get(n) for n in names]) for k, (_id, _e, env, _x) in enumerate(TABLE)
    ]
    df = spark.createDataFrame(rows, schema).repartition(2)
    cols = {n: F.col(n) for n in names}
    by_expr: dict = {}
    for k, (_id, expr, _env, _x) in enumerate(TABLE):
        by_expr.setdefault(expr, []).append(k)
    out = [F.col("_row")]
    slot_of = {}
    for u, (expr, ks) in enumerate(by_expr.items()):
        value, err = compile_column_with_error(expr, cols, F.col("_t"))
        mine = F.col("_row").isin(ks)
        out.append(F.when(mine, value).alias(f"v{u}"))
        out.append(F.when(mine, err).alias(f"e{u}"))
        for k in ks:
            slot_of[k] = u
    return df.select(*out), slot_of


@pytest.fixture(scope="module", params=["ansi", "legacy"])
def spark_results(request, spark, spark_query):
    """``{row index: (value, error flag)}`` with ANSI mode on (Spark 4's default) or off."""
    query, slot_of = spark_query
    before = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", "true" if request.param == "ansi" else "false")
    try:
        got = {}
        for r in query.collect():
            k = r["_row"]
            u = slot_of[k]
            got[k] = (r[f"v{u}"], r[f"e{u}"])
        yield got
    finally:
        spark.conf.set("spark.sql.ansi.enabled", before)


def test_spark(spark_results):
    failures = []
    for k, (row_id, _expr, _env, expected) in enumerate(TABLE):
        value, err = spark_results[k]
        if expected == ERROR:
            if not (err is True and value is None):
                failures.append(f"{row_id}: expected error, got value={value!r} err={err!r}")
        elif err is not False or not same(value, expected):
            failures.append(f"{row_id}: expected {expected!r}, got value={value!r} err={err!r}")
    assert not failures, "\n".join(failures)
