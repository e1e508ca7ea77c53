"""Every row of the conformance table through the Python and the Spark engine (SPEC §5.10).

The Spark run is one DataFrame for the whole table: one row per table row
(features as typed columns), one output column per table row, guarded by
the row id, plus the engine's error flag. It runs with ANSI mode on (the
Spark 4 default) and off: the generated columns must not depend on it.
"""

from __future__ import annotations

import pytest

from compiler.codegen.python import EvalError, compile_expr
from compiler.typesystem import SPARK_TYPES
from tests.conformance.compare import same
from tests.conformance.table import ERROR, FEATURES, T0, TABLE

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


def _spark_results(spark):
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructField, StructType, _parse_datatype_string

    from compiler.codegen.spark import compile_column_with_error

    names = list(FEATURES)
    schema = StructType(
        [StructField("_row", _parse_datatype_string("bigint")), StructField("_t", _parse_datatype_string("bigint"))]
        + [StructField(n, _parse_datatype_string(SPARK_TYPES[FEATURES[n]])) for n in names]
    )
    rows = [
        (k, env.get("_t", T0), *[env.get(n) for n in names]) for k, (_id, _e, env, _x) in enumerate(TABLE)
    ]
    df = spark.createDataFrame(rows, schema).repartition(2)
    cols = {n: F.col(n) for n in names}
    out = [F.col("_row")]
    for k, (_id, expr, _env, _x) in enumerate(TABLE):
        value, err = compile_column_with_error(expr, cols, F.col("_t"))
        mine = F.col("_row") == k
        out.append(F.when(mine, value).alias(f"v{k}"))
        out.append(F.when(mine, err).alias(f"e{k}"))
    got = {}
    for r in df.select(*out).collect():
        k = r["_row"]
        got[k] = (r[f"v{k}"], r[f"e{k}"])
    return got


@pytest.fixture(scope="module", params=["ansi", "legacy"])
def spark_results(request, spark):
    before = spark.conf.get("spark.sql.ansi.enabled")
    spark.conf.set("spark.sql.ansi.enabled", "true" if request.param == "ansi" else "false")
    try:
        yield _spark_results(spark)
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
