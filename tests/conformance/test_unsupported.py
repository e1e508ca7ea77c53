"""Both generators refuse what they cannot express at compile time, with the same error type."""

from __future__ import annotations

import warnings

import pytest

from compiler.codegen import UnsupportedError
from compiler.codegen.python import compile_expr, python_source
from compiler.plan import Expr
from tests.conformance.table import TABLE, C, L, O, i, p, q, s, tp

UNSUPPORTED = [
    ("match-pattern-not-literal", O("match", s, s)),
    ("match-invalid-regex", O("match", s, L("("))),
    ("unknown-operator", Expr("op", "int", op="pow", args=(i, i))),
    ("unknown-function", Expr("call", "int", op="Nope", args=(i,))),
    ("wrong-arity", Expr("call", "int", op="Len", args=(s, s))),
    ("bitnot-float", Expr("op", "float", op="bitnot", args=(L(1.5),))),
    ("in-without-list", Expr("op", "bool", op="in", args=(i, i))),
    ("list-outside-in", Expr("list", "int", args=(i,))),
    ("field-of-string", Expr("op", "string", op="field", args=(s, L("x")))),
    ("field-name-not-literal", Expr("op", "string", op="field", args=(p, s))),
    ("index-of-string", Expr("op", "string", op="index", args=(s, L(0)))),
    ("index-float", Expr("op", "string", op="index", args=(q, L(0.0)))),
    ("tuple-index-not-literal", Expr("op", "string", op="index", args=(tp, i))),
    ("tuple-index-out-of-range", Expr("op", "string", op="index", args=(tp, L(2)))),
    ("tuple-index-negative", Expr("op", "int", op="index", args=(tp, L(-1)))),
    ("len-of-int", Expr("call", "int", op="Len", args=(i,))),
]


@pytest.mark.parametrize("expr", [e for _, e in UNSUPPORTED], ids=[n for n, _ in UNSUPPORTED])
def test_python_refuses(expr):
    if expr.args and expr.args[-1].kind == "lit" and expr.args[-1].value == "(":
        with pytest.raises(UnsupportedError, match="invalid regular expression"):
            compile_expr(expr)
        return
    with pytest.raises(UnsupportedError):
        compile_expr(expr)


def test_spark_refuses(spark):
    from pyspark.sql import functions as F

    from compiler.codegen.spark import compile_column

    cols = {n: F.col(n) for n in ("i", "s", "p", "q", "tp")}
    for _name, expr in UNSUPPORTED:
        with pytest.raises(UnsupportedError):
            compile_column(expr, cols, F.lit(0))
    # valid in Python, invalid in Java: refused at compile time too (the JVM is at hand here)
    with pytest.raises(UnsupportedError, match="Java"):
        compile_column(O("match", s, L("(?P<n>a)")), cols, F.lit(0))
    with pytest.raises(UnsupportedError, match="no column"):
        compile_column(O("add", i, L(1)), {}, F.lit(0))


def test_generated_source_compiles_cleanly():
    """No SyntaxWarning (e.g. ``is`` with a literal) in any generated function."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _id, expr, _env, _x in TABLE:
            src, _ns = python_source(expr)
            compile(src, "<test>", "exec")


def test_deep_nesting_is_refused_cleanly():
    expr = L(True)
    for _ in range(200):
        expr = O("and", L(True), expr)
    with pytest.raises(UnsupportedError, match="nested"):
        compile_expr(expr)
    shallow = L(1)
    for _ in range(50):
        shallow = C("Coalesce", i, shallow)
    assert compile_expr(shallow)({}, 0) == 1
