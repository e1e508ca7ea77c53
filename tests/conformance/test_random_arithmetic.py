"""Python and Spark agree on random arithmetic over ints, floats and nulls (SPEC §5.10).

Hypothesis draws a few hundred ``(expression, env)`` cases --
operators, ``Maximum``/``Minimum``/``Coalesce``/``If``/casts, comparisons and
three-valued logic over int/float features and literals including 0, -0.0,
64-bit extremes and 1e308 -- which are collected and run as one Spark
DataFrame. A case agrees when both engines give the same value (floats
within 1e-9 relative) or both report an error. There is no shrinking across
the Spark run: a failure lists the disagreeing cases as plan JSON.
"""

from __future__ import annotations

import json

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from compiler.codegen.python import EvalError, compile_expr
from compiler.plan import Expr
from compiler.typesystem import INT64_MAX, INT64_MIN
from tests.conformance.compare import grouped_columns, same
from tests.conformance.table import C, L, O, R

ERROR = "<error>"
BATCH = 300

INT_VALUES = st.one_of(
    st.integers(-7, 7),
    st.sampled_from([INT64_MAX, INT64_MIN, 1 << 62, -(1 << 62), 1 << 53, (1 << 53) + 1, 1_000_000_007]),
)
FLOAT_VALUES = st.one_of(
    st.floats(-1e6, 1e6, allow_nan=False),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([0.0, -0.0, 0.5, -2.5, 3.0, 1e308, -1e308, 5e-324, 1e-300]),
)

_int_refs = st.sampled_from([R("i"), R("j")])
_float_refs = st.sampled_from([R("f"), R("g")])
int_leaf = st.one_of(_int_refs, _int_refs, _int_refs, INT_VALUES.map(L), INT_VALUES.map(L), st.just(L(None, "int")))
float_leaf = st.one_of(_float_refs, _float_refs, _float_refs, FLOAT_VALUES.map(L), FLOAT_VALUES.map(L),
                       st.just(L(None, "float")))


def _unary(op: str, a: Expr) -> Expr:
    if op == "neg":
        return O("neg", a)
    return C("Int", a) if a.type == "float" else C("Float", a)


def _extend(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    binary = st.tuples(st.sampled_from(["add", "sub", "mul", "div", "floordiv", "mod"]), children, children).map(
        lambda t: O(t[0], t[1], t[2]))
    calls = st.tuples(st.sampled_from(["Maximum", "Minimum", "Coalesce"]), children, children).map(
        lambda t: C(t[0], t[1], t[2]))
    conditional = st.tuples(_compare(children), children, children).map(lambda t: C("If", t[0], t[1], t[2]))
    unary = st.tuples(st.sampled_from(["neg", "cast"]), children).map(lambda t: _unary(*t))
    return st.one_of(binary, binary, binary, binary, calls, conditional, unary)


def _compare(numbers: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    return st.tuples(st.sampled_from(["eq", "ne", "lt", "gt", "le", "ge"]), numbers, numbers).map(
        lambda t: O(t[0], t[1], t[2]))


numbers = st.recursive(st.one_of(int_leaf, float_leaf), _extend, max_leaves=6)


def _logic(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
    return st.one_of(
        st.tuples(st.sampled_from(["and", "or"]), children, children).map(lambda t: O(t[0], t[1], t[2])),
        children.map(lambda a: O("not", a)),
    )


booleans = st.recursive(
    st.one_of(_compare(numbers), numbers.map(lambda a: O("is_null", a)), st.just(R("b")), st.just(L(None, "bool"))),
    _logic,
    max_leaves=4,
)
expressions = st.one_of(numbers, numbers, booleans)
def _maybe(values: st.SearchStrategy) -> st.SearchStrategy:
    return st.one_of(values, values, values, values, values, values, st.none())


envs = st.fixed_dictionaries({
    "i": _maybe(INT_VALUES), "j": _maybe(INT_VALUES), "f": _maybe(FLOAT_VALUES), "g": _maybe(FLOAT_VALUES),
    "b": _maybe(st.booleans()),
})

FEATURES = {"i": "bigint", "j": "bigint", "f": "double", "g": "double", "b": "boolean"}
T0 = 1_357_035_420_000


def _python(expr: Expr, env: dict):
    try:
        return compile_expr(expr)(env, T0)
    except EvalError:
        return ERROR


def _draw_batch() -> list[tuple[Expr, dict]]:
    """Let Hypothesis generate :data:`BATCH` cases (each one small), collected for one Spark run."""
    batch: list[tuple[Expr, dict]] = []

    @settings(max_examples=BATCH, deadline=None, database=None, phases=[Phase.generate],
              suppress_health_check=list(HealthCheck))
    @given(case=st.tuples(expressions, envs))
    def collect(case):
        _python(*case)  # the Python engine never raises anything but EvalError
        batch.append(case)

    collect()
    return batch


def test_python_and_spark_agree(spark):
    batch = _draw_batch()
    from pyspark.sql import functions as F

    from compiler.codegen.spark import compile_column_with_error

    names = list(FEATURES)
    schema = "_row bigint, " + ", ".join(f"{n} {t}" for n, t in FEATURES.items())
    df = spark.createDataFrame([(k, *[env.get(n) for n in names]) for k, (_e, env) in enumerate(batch)], schema)
    cols = {n: F.col(n) for n in names}
    out, slot_of = grouped_columns([expr for expr, _env in batch],
                                   lambda expr: compile_column_with_error(expr, cols, F.lit(T0)))
    failures = []
    for r in df.select(*out).collect():
        k = r["_row"]
        u = slot_of[k]
        expr, env = batch[k]
        spark_value = ERROR if r[f"e{u}"] else r[f"v{u}"]
        if r[f"e{u}"] and r[f"v{u}"] is not None:
            spark_value = ("error with a value", r[f"v{u}"])
        py_value = _python(expr, env)
        agree = spark_value == py_value if ERROR in (spark_value, py_value) else same(spark_value, py_value)
        if not agree:
            failures.append(f"env={env} python={py_value!r} spark={spark_value!r} expr={json.dumps(expr.to_json())}")
    assert not failures, f"{len(failures)} of {len(batch)} disagree:\n" + "\n".join(failures[:20])


def test_integer_chains_are_evaluated_as_written(spark):
    """A chain of integer ``*`` or ``+`` is not reordered to fold its constants first (``writer.session.
    EXCLUDED_RULES``): ``4 * (INT64_MAX * i)`` at ``i = 0`` is 0, not an overflow, on both engines; the case
    the random draw above found (2026-12-04), and its ``+`` twin."""
    from pyspark.sql import functions as F

    from compiler.codegen.spark import compile_column_with_error
    from writer.session import EXCLUDED_RULES

    assert set(EXCLUDED_RULES) <= set(spark.conf.get("spark.sql.optimizer.excludedRules").split(","))
    cases = [
        (O("mul", L(4), O("mul", L(INT64_MAX), R("i"))), {"i": 0}, 0),
        (O("mul", L(4), O("mul", L(INT64_MAX), R("i"))), {"i": 1}, ERROR),
        (O("add", L(4), O("add", L(INT64_MAX), R("i"))), {"i": -5}, INT64_MAX - 1),
        (O("add", L(-4), O("add", L(INT64_MIN), R("i"))), {"i": 5}, INT64_MIN + 1),
    ]
    df = spark.createDataFrame([(k, env["i"]) for k, (_e, env, _w) in enumerate(cases)], "_row bigint, i bigint")
    for k, (expr, env, want) in enumerate(cases):
        v, err = compile_column_with_error(expr, {"i": F.col("i")}, F.lit(T0))
        row = df.where(F.col("_row") == k).select(v.alias("v"), err.alias("e")).first()
        assert (ERROR if row["e"] else row["v"]) == want == _python(expr, env), (k, row)
