"""The conformance table: every operator and built-in, run through both engines (SPEC §5.10).

Each row is ``(id, expr, env, expected)``: ``expr`` an :class:`Expr` built
with the small constructors below, ``env`` the feature values of the event
(names and types in :data:`FEATURES`; ``_t`` overrides the event time
:data:`T0`), ``expected`` the run-time value or :data:`ERROR` (the Python
engine raises ``EvalError``, Spark gives null with its error flag set).
The constructors infer result types with :mod:`compiler.functions`, the
checker's own typing rules.

Aggregate-shaped features (structs, arrays, tuples; SPEC §2.3 ``.`` and
``[]``) take their run-time values: a struct is a ``dict`` keyed by field
name, an array a ``list``, a tuple a ``list`` in component order, times
inside them int ms. The Spark run builds the same values as Spark structs
and arrays (:func:`compiler.codegen.spark.spark_ddl`, or the layout in
:data:`SPARK_LAYOUT`).
"""

from __future__ import annotations

from typing import Any

from compiler import functions
from compiler.plan import Expr
from compiler.typesystem import INT64_MAX, INT64_MIN, MAX_TIME_MS, MIN_TIME_MS, parse_time, parse_type

ERROR = "<error>"

#: Feature names usable in the table, with their types.
FEATURES = {
    "i": "int", "j": "int", "f": "float", "g": "float", "s": "string", "u": "string",
    "t": "time", "t2": "time", "d": "duration", "b": "bool", "c": "bool",
    # aggregate results: Latest(ip, amount, at), Sequence(ip), Sequence(n), Sequence(at),
    # Sequence(ip, n), Set(ip, n) and one item of it
    "p": "struct{ip:string,amount:float,at:time}", "q": "array<string>", "ns": "array<int>",
    "ts": "array<time>", "ss": "array<struct{ip:string,n:int}>", "ps": "array<tuple{string,int}>",
    "tp": "tuple{string,int}", "tv": "tuple{string,int}",
}
#: Spark column types that differ from ``spark_ddl`` of the feature's type: a
#: tuple whose producer named its components otherwise (read by position).
SPARK_LAYOUT = {"tv": "struct<v0:string,v1:int>"}
#: Default event time: 2013-01-01T10:17:00.000Z.
T0 = 1_357_035_420_000
INF = float("inf")


def _lit_type(v: Any) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, int):
        return "int"
    if isinstance(v, float):
        return "float"
    return "string"


def L(v: Any, type_name: str | None = None) -> Expr:
    """A literal (type inferred from the Python value unless given)."""
    return Expr("lit", type_name or _lit_type(v), value=v)


def D(seconds: float) -> Expr:
    """A duration literal."""
    return Expr("lit", "duration", value=float(seconds))


def TM(text: str) -> Expr:
    """A time literal from ISO text."""
    return Expr("lit", "time", value=parse_time(text))


def R(name: str) -> Expr:
    """A reference to a feature of :data:`FEATURES`."""
    return Expr("ref", FEATURES[name], name=name)


def LIST(*items: Expr) -> Expr:
    """A literal list (right side of ``in``)."""
    return Expr("list", functions.unify_all([x.type for x in items]) or "null", args=items)


def O(op: str, *args: Expr) -> Expr:
    """An operator node; result type by the checker's rules."""
    if op in ("in", "not_in", "is_null", "is_not_null"):
        t = "bool"
    elif len(args) == 1:
        t = functions.unary_result(op, args[0].type)
    else:
        t = functions.binary_result(op, args[0].type, args[1].type)
    assert t is not None, (op, [a.type for a in args])
    return Expr("op", t, op=op, args=args)


def FIELD(x: Expr, name: str) -> Expr:
    """``x.name`` on a struct (or a null literal)."""
    t = "null" if x.type == "null" else dict(parse_type(x.type)[1])[name]
    return Expr("op", t, op="field", args=(x, L(name)))


def AT(x: Expr, index: Expr) -> Expr:
    """``x[index]`` on an array (any int index) or a tuple (an int literal in range)."""
    kind, param = parse_type(x.type) if x.type != "null" else ("null", "null")
    t = param[index.value] if kind == "tuple" else param
    return Expr("op", t, op="index", args=(x, index))


def C(fn: str, *args: Expr) -> Expr:
    """A built-in call; result type by the checker's rules."""
    t = functions.SCALAR_FUNCTIONS[fn].result([a.type for a in args])
    assert t is not None, (fn, [a.type for a in args])
    return Expr("call", t, op=fn, args=args)


i, j, f, g, s, u, t, t2, d, b, c = (R(n) for n in ("i", "j", "f", "g", "s", "u", "t", "t2", "d", "b", "c"))
p, q, ns, ts, ss, ps, tp, tv = (R(n) for n in ("p", "q", "ns", "ts", "ss", "ps", "tp", "tv"))
NULL = L(None)
ZERO_DIV = O("div", L(1), L(0))  # an erroring sub-expression


def _time_ms(text: str) -> int:
    return parse_time(text)


P1 = {"ip": "1.1.1.1", "amount": 2.5, "at": T0 - 60_000}
Q3 = ["a", "b", "c"]
SS = [{"ip": "a", "n": 1}, {"ip": "é😀", "n": 2}]
PS = [["a", 1], ["b", 2]]


TABLE: list[tuple[str, Expr, dict[str, Any], Any]] = [
    # ---------------------------------------------------------- refs, literals
    ("ref-int", i, {"i": 5}, 5),
    ("ref-missing", i, {}, None),
    ("lit-null", NULL, {}, None),
    ("lit-unicode", L("é😀"), {}, "é😀"),
    # -------------------------------------------------------------- unary ops
    ("neg-int", O("neg", i), {"i": 5}, -5),
    ("neg-null", O("neg", i), {}, None),
    ("neg-float", O("neg", f), {"f": 2.5}, -2.5),
    ("neg-min-overflow", O("neg", i), {"i": INT64_MIN}, ERROR),
    ("neg-duration", O("neg", d), {"d": 3.0}, -3.0),
    ("bitnot", O("bitnot", i), {"i": 5}, -6),
    ("bitnot-neg", O("bitnot", i), {"i": -1}, 0),
    ("bitnot-null", O("bitnot", i), {}, None),
    # ------------------------------------------------------------------- mul
    ("mul-int", O("mul", i, j), {"i": 6, "j": 7}, 42),
    ("mul-neg", O("mul", i, j), {"i": -3, "j": 4}, -12),
    ("mul-null", O("mul", i, j), {"i": 6}, None),
    ("mul-overflow", O("mul", i, L(4)), {"i": 1 << 62}, ERROR),
    ("mul-min", O("mul", i, L(-1)), {"i": INT64_MIN + 1}, INT64_MAX),
    ("mul-promote", O("mul", i, f), {"i": 2, "f": 2.5}, 5.0),
    ("mul-float-inf", O("mul", f, L(10.0)), {"f": 1e308}, INF),
    ("mul-nan-error", O("mul", O("mul", f, L(10.0)), L(0.0)), {"f": 1e308}, ERROR),
    ("mul-duration", O("mul", d, L(2)), {"d": 3.0}, 6.0),
    ("mul-duration-left", O("mul", L(1.5), d), {"d": 3.0}, 4.5),
    # ------------------------------------------------------------------- div
    ("div-int", O("div", i, j), {"i": 7, "j": 2}, 3.5),
    ("div-neg", O("div", i, j), {"i": -7, "j": 2}, -3.5),
    ("div-zero", O("div", i, j), {"i": 1, "j": 0}, ERROR),
    ("div-zero-float", O("div", f, g), {"f": 1.0, "g": 0.0}, ERROR),
    ("div-neg-zero", O("div", f, g), {"f": 1.0, "g": -0.0}, ERROR),
    ("div-null-by-zero", O("div", i, j), {"j": 0}, None),
    ("div-by-null", O("div", i, j), {"i": 0}, None),
    ("div-exact-promotion", O("div", i, L(1)), {"i": (1 << 53) + 1}, 9007199254740992.0),
    ("div-inf-inf", O("div", O("mul", f, L(10.0)), O("mul", f, L(10.0))), {"f": 1e308}, ERROR),
    ("div-duration", O("div", d, L(2)), {"d": 3.0}, 1.5),
    ("div-duration-duration", O("div", d, D(1.5)), {"d": 3.0}, 2.0),
    # -------------------------------------------------------------- floordiv
    ("floordiv", O("floordiv", i, j), {"i": 7, "j": 2}, 3),
    ("floordiv-neg-left", O("floordiv", i, j), {"i": -7, "j": 2}, -4),
    ("floordiv-neg-right", O("floordiv", i, j), {"i": 7, "j": -2}, -4),
    ("floordiv-neg-both", O("floordiv", i, j), {"i": -7, "j": -2}, 3),
    ("floordiv-exact-neg", O("floordiv", i, j), {"i": -8, "j": 2}, -4),
    ("floordiv-zero", O("floordiv", i, j), {"i": 7, "j": 0}, ERROR),
    ("floordiv-min-overflow", O("floordiv", i, j), {"i": INT64_MIN, "j": -1}, ERROR),
    ("floordiv-min", O("floordiv", i, j), {"i": INT64_MIN, "j": 1}, INT64_MIN),
    ("floordiv-float", O("floordiv", f, L(2)), {"f": 7.5}, 3.0),
    ("floordiv-float-neg", O("floordiv", f, L(2)), {"f": -7.5}, -4.0),
    ("floordiv-float-rounding", O("floordiv", L(1), f), {"f": 0.1}, 10.0),
    ("floordiv-float-zero", O("floordiv", f, g), {"f": 7.0, "g": 0.0}, ERROR),
    ("floordiv-float-huge", O("floordiv", f, L(0.5)), {"f": 1e300}, 2e300),
    ("floordiv-null-zero", O("floordiv", i, j), {"j": 0}, None),
    # ------------------------------------------------------------------- mod
    ("mod", O("mod", i, j), {"i": 7, "j": 3}, 1),
    ("mod-neg-left", O("mod", i, j), {"i": -7, "j": 3}, 2),
    ("mod-neg-right", O("mod", i, j), {"i": 7, "j": -3}, -2),
    ("mod-neg-both", O("mod", i, j), {"i": -7, "j": -3}, -1),
    ("mod-zero", O("mod", i, j), {"i": 7, "j": 0}, ERROR),
    ("mod-min", O("mod", i, j), {"i": INT64_MIN, "j": -1}, 0),
    ("mod-float", O("mod", f, L(2)), {"f": 5.5}, 1.5),
    ("mod-float-neg-left", O("mod", f, L(2)), {"f": -5.5}, 0.5),
    ("mod-float-neg-right", O("mod", f, L(-2)), {"f": 5.5}, -0.5),
    ("mod-float-tiny", O("mod", f, L(1.0)), {"f": -1e-20}, 1.0),
    ("mod-float-zero", O("mod", L(2), g), {"g": 0.0}, ERROR),
    ("mod-float-inf-error", O("mod", O("mul", f, L(10.0)), L(2.0)), {"f": 1e308}, ERROR),
    ("mod-float-by-inf", O("mod", f, O("mul", g, L(10.0))), {"f": -2.0, "g": 1e308}, INF),
    ("mod-null-zero", O("mod", i, j), {"j": 0}, None),
    ("mod-negzero-sign", C("String", O("mod", f, g)), {"f": 6.0, "g": -3.0}, "-0.0"),
    ("mod-poszero-sign", C("String", O("mod", f, g)), {"f": -6.0, "g": 3.0}, "0.0"),
    # ------------------------------------------------------------------- add
    ("add-int", O("add", i, j), {"i": 2, "j": 3}, 5),
    ("add-promote", O("add", i, f), {"i": 2, "f": 0.5}, 2.5),
    ("add-overflow", O("add", i, L(1)), {"i": INT64_MAX}, ERROR),
    ("add-underflow", O("add", i, L(-1)), {"i": INT64_MIN}, ERROR),
    ("add-null", O("add", i, NULL), {"i": 2}, None),
    ("add-string", O("add", s, u), {"s": "a", "u": "b"}, "ab"),
    ("add-string-unicode", O("add", s, u), {"s": "é", "u": "😀"}, "é😀"),
    ("add-string-null", O("add", s, u), {"s": "a"}, None),
    ("add-string-empty", O("add", s, u), {"s": "", "u": ""}, ""),
    ("add-time-duration", O("add", t, d), {"t": T0, "d": 90.5}, T0 + 90_500),
    ("add-duration-time", O("add", d, t), {"t": T0, "d": 90.5}, T0 + 90_500),
    ("add-time-half-ms-up", O("add", t, d), {"t": T0, "d": 0.0005}, T0 + 1),
    ("add-time-below-half-ms", O("add", t, d), {"t": T0, "d": 0.0004}, T0),
    ("add-time-neg-half-ms", O("add", t, d), {"t": T0, "d": -0.0005}, T0),
    ("add-time-neg-duration", O("add", t, d), {"t": T0, "d": -1.5}, T0 - 1500),
    ("add-time-huge-duration", O("add", t, d), {"t": T0, "d": 1e300}, ERROR),
    ("add-time-overflow", O("add", t, d), {"t": INT64_MAX - 10, "d": 1.0}, ERROR),
    ("add-time-null", O("add", t, d), {"d": 1.0}, None),
    ("add-duration-duration", O("add", d, D(1.25)), {"d": 3.0}, 4.25),
    ("add-float-inf-nan", O("add", O("mul", f, L(10.0)), O("mul", g, L(10.0))), {"f": 1e308, "g": -1e308}, ERROR),
    # ------------------------------------------------------------------- sub
    ("sub-int", O("sub", i, j), {"i": 5, "j": 7}, -2),
    ("sub-float", O("sub", f, L(2)), {"f": 0.5}, -1.5),
    ("sub-overflow", O("sub", i, L(1)), {"i": INT64_MIN}, ERROR),
    ("sub-time-time", O("sub", t, t2), {"t": T0, "t2": T0 - 1500}, 1.5),
    ("sub-time-time-neg", O("sub", t2, t), {"t": T0, "t2": T0 - 1500}, -1.5),
    ("sub-time-time-ms", O("sub", t, t2), {"t": 1, "t2": 0}, 0.001),
    ("sub-time-time-overflow", O("sub", t, t2), {"t": INT64_MAX, "t2": -1}, ERROR),
    ("sub-time-duration", O("sub", t, d), {"t": T0, "d": 90.5}, T0 - 90_500),
    ("sub-time-pre-1970", O("sub", t, D(86400 * 365)), {"t": 0}, -31_536_000_000),
    ("sub-duration-duration", O("sub", d, D(0.5)), {"d": 3.0}, 2.5),
    # ----------------------------------------------------------------- shifts
    ("shl", O("shl", i, j), {"i": 1, "j": 3}, 8),
    ("shl-to-sign-overflow", O("shl", i, j), {"i": 1, "j": 63}, ERROR),
    ("shl-min", O("shl", i, j), {"i": -1, "j": 63}, INT64_MIN),
    ("shl-negative-count", O("shl", i, j), {"i": 1, "j": -1}, ERROR),
    ("shl-zero-far", O("shl", i, j), {"i": 0, "j": 100}, 0),
    ("shl-far", O("shl", i, j), {"i": 3, "j": 64}, ERROR),
    ("shl-overflow", O("shl", i, j), {"i": 3, "j": 62}, ERROR),
    ("shl-null", O("shl", i, j), {"j": 1}, None),
    ("shr", O("shr", i, j), {"i": -16, "j": 2}, -4),
    ("shr-far", O("shr", i, j), {"i": 5, "j": 70}, 0),
    ("shr-far-neg", O("shr", i, j), {"i": -5, "j": 70}, -1),
    ("shr-negative-count", O("shr", i, j), {"i": 1, "j": -1}, ERROR),
    # --------------------------------------------------------------- bitwise
    ("bitand", O("bitand", i, j), {"i": 12, "j": 10}, 8),
    ("bitxor", O("bitxor", i, j), {"i": 12, "j": 10}, 6),
    ("bitor", O("bitor", i, j), {"i": 12, "j": 10}, 14),
    ("bitand-neg", O("bitand", i, j), {"i": -1, "j": 255}, 255),
    ("bitor-null", O("bitor", i, j), {"i": 1}, None),
    # ------------------------------------------------------------ comparison
    ("eq-int-float", O("eq", i, f), {"i": 1, "f": 1.0}, True),
    ("eq-promote-precision", O("eq", i, f), {"i": (1 << 53) + 1, "f": float(1 << 53)}, True),
    ("eq-string", O("eq", s, u), {"s": "a", "u": "a"}, True),
    ("eq-string-case", O("eq", s, u), {"s": "A", "u": "a"}, False),
    ("eq-time", O("eq", t, t2), {"t": T0, "t2": T0}, True),
    ("eq-null-null", O("eq", NULL, NULL), {}, None),
    ("eq-null", O("eq", i, j), {"i": 1}, None),
    ("eq-neg-zero", O("eq", f, g), {"f": 0.0, "g": -0.0}, True),
    ("eq-bool", O("eq", b, c), {"b": True, "c": True}, True),
    ("ne", O("ne", s, u), {"s": "A", "u": "a"}, True),
    ("ne-null", O("ne", s, u), {"s": "A"}, None),
    ("lt-int-float", O("lt", i, f), {"i": 1, "f": 2.5}, True),
    ("lt-string", O("lt", s, u), {"s": "a", "u": "b"}, True),
    ("lt-string-codepoint-case", O("lt", s, u), {"s": "Z", "u": "a"}, True),
    ("gt-string-accent", O("gt", s, u), {"s": "é", "u": "z"}, True),
    ("gt-string-astral", O("gt", s, u), {"s": "😀", "u": "\uffff"}, True),
    ("lt-string-prefix", O("lt", s, u), {"s": "ab", "u": "abc"}, True),
    ("lt-time", O("lt", t, t2), {"t": -1, "t2": 0}, True),
    ("ge-duration", O("ge", d, D(3.0)), {"d": 3.0}, True),
    ("le-int", O("le", i, j), {"i": 3, "j": 3}, True),
    ("gt-int", O("gt", i, j), {"i": -3, "j": 3}, False),
    ("lt-null", O("lt", i, j), {"j": 1}, None),
    ("lt-inf", O("lt", f, O("mul", g, L(10.0))), {"f": 1e308, "g": 1e308}, True),
    # ------------------------------------------------------------------ match
    ("match-infix", O("match", s, L("o w")), {"s": "hello world"}, True),
    ("match-anchor", O("match", s, L("^h")), {"s": "hello world"}, True),
    ("match-anchor-miss", O("match", s, L("^w")), {"s": "hello world"}, False),
    ("match-digits", O("match", s, L(r"\d+")), {"s": "abc123"}, True),
    ("match-digits-ascii-only", O("match", s, L(r"\d")), {"s": "٣"}, False),
    ("match-word-ascii-only", O("match", s, L(r"^\w$")), {"s": "é"}, False),
    ("match-ignorecase", O("match", s, L("(?i)abc")), {"s": "xABCx"}, True),
    ("match-dot-newline", O("match", s, L("a.b")), {"s": "a\nb"}, False),
    ("match-class", O("match", s, L("^[a-z]+@[a-z]+\\.com$")), {"s": "ann@example.com"}, True),
    ("match-alternation", O("match", s, L("cat|dog")), {"s": "hotdog"}, True),
    ("match-unicode-literal", O("match", s, L("é+")), {"s": "caféé"}, True),
    ("match-empty", O("match", s, L("")), {"s": ""}, True),
    ("match-null", O("match", s, L("a")), {}, None),
    ("match-null-pattern", O("match", s, NULL), {"s": "a"}, None),
    # -------------------------------------------------------------------- in
    ("in-hit", O("in", i, LIST(L(1), L(2), L(3))), {"i": 2}, True),
    ("in-miss", O("in", i, LIST(L(1), L(2), L(3))), {"i": 4}, False),
    ("in-miss-with-null", O("in", i, LIST(L(1), NULL)), {"i": 4}, None),
    ("in-hit-with-null", O("in", i, LIST(L(1), NULL)), {"i": 1}, True),
    ("in-null-needle", O("in", i, LIST(L(1), L(2))), {}, None),
    ("in-promote-needle", O("in", i, LIST(L(1.5), L(2.0))), {"i": 2}, True),
    ("in-promote-items", O("in", f, LIST(L(1), L(2))), {"f": 2.0}, True),
    ("in-string", O("in", s, LIST(L("a"), L("é"))), {"s": "é"}, True),
    ("in-empty", O("in", i, LIST()), {"i": 1}, False),
    ("in-empty-null", O("in", i, LIST()), {}, None),
    ("in-refs-hit", O("in", i, LIST(j, L(3))), {"i": 3}, True),
    ("in-refs-null", O("in", i, LIST(j, L(3))), {"i": 4}, None),
    ("in-refs-miss", O("in", i, LIST(j, L(3))), {"i": 4, "j": 5}, False),
    ("in-error-item", O("in", i, LIST(O("floordiv", L(1), j))), {"i": 4, "j": 0}, ERROR),
    ("not-in-miss", O("not_in", i, LIST(L(1), L(2))), {"i": 4}, True),
    ("not-in-hit", O("not_in", i, LIST(L(1), L(2))), {"i": 2}, False),
    ("not-in-null-item", O("not_in", i, LIST(L(1), NULL)), {"i": 4}, None),
    ("not-in-null-needle", O("not_in", i, LIST()), {}, None),
    ("not-in-empty", O("not_in", i, LIST()), {"i": 1}, True),
    ("not-in-refs", O("not_in", s, LIST(u, L("x"))), {"s": "a", "u": "b"}, True),
    ("not-in-refs-null", O("not_in", s, LIST(u, L("x"))), {"s": "a"}, None),
    # ---------------------------------------------------------------- is null
    ("is-null-null", O("is_null", NULL), {}, True),
    ("is-null-ref", O("is_null", i), {}, True),
    ("is-null-value", O("is_null", i), {"i": 5}, False),
    ("is-not-null", O("is_not_null", s), {"s": ""}, True),
    ("is-not-null-null", O("is_not_null", s), {}, False),
    ("is-null-error", O("is_null", ZERO_DIV), {}, ERROR),
    # ------------------------------------------------------------------ logic
    ("not-true", O("not", b), {"b": True}, False),
    ("not-null", O("not", b), {}, None),
    ("and-tt", O("and", b, c), {"b": True, "c": True}, True),
    ("and-tf", O("and", b, c), {"b": True, "c": False}, False),
    ("and-null-false", O("and", b, c), {"c": False}, False),
    ("and-false-null", O("and", b, c), {"b": False}, False),
    ("and-null-true", O("and", b, c), {"c": True}, None),
    ("and-null-null", O("and", b, c), {}, None),
    ("or-null-true", O("or", b, c), {"c": True}, True),
    ("or-true-null", O("or", b, c), {"b": True}, True),
    ("or-null-false", O("or", b, c), {"c": False}, None),
    ("or-ff", O("or", b, c), {"b": False, "c": False}, False),
    ("and-lazy", O("and", b, O("gt", ZERO_DIV, L(0))), {"b": False}, False),
    ("and-eager", O("and", b, O("gt", ZERO_DIV, L(0))), {"b": True}, ERROR),
    ("and-null-evaluates", O("and", b, O("gt", ZERO_DIV, L(0))), {}, ERROR),
    ("or-lazy", O("or", b, O("gt", ZERO_DIV, L(0))), {"b": True}, True),
    ("or-eager", O("or", b, O("gt", ZERO_DIV, L(0))), {"b": False}, ERROR),
    ("and-first-error", O("and", O("gt", ZERO_DIV, L(0)), b), {"b": False}, ERROR),
    ("logic-nested", O("or", O("and", b, O("not", c)), O("is_null", i)), {"b": True, "c": False, "i": 1}, True),
    # ---------------------------------------------------------------- EventTime
    ("eventtime", C("EventTime"), {}, T0),
    ("eventtime-pre-1970", C("EventTime"), {"_t": -86_400_001}, -86_400_001),
    ("eventtime-minus-time", O("sub", C("EventTime"), t), {"t": T0 - 60_000}, 60.0),
    # ------------------------------------------------------------------- Time
    ("time-z", C("Time", s), {"s": "2013-01-01T10:17:00Z"}, T0),
    ("time-ms", C("Time", s), {"s": "2013-01-01T10:17:00.123Z"}, T0 + 123),
    ("time-ns-truncated", C("Time", s), {"s": "2013-01-01T10:17:00.123987654Z"}, T0 + 123),
    ("time-frac-1-digit", C("Time", s), {"s": "2013-01-01T10:17:00.5Z"}, T0 + 500),
    ("time-frac-comma", C("Time", s), {"s": "2013-01-01T10:17:00,25Z"}, T0 + 250),
    ("time-naive-space", C("Time", s), {"s": "2013-01-01 10:17:00"}, T0),
    ("time-lower-t-z", C("Time", s), {"s": "2013-01-01t10:17:00z"}, T0),
    ("time-offset-plus", C("Time", s), {"s": "2013-01-01T12:17:00+02:00"}, T0),
    ("time-offset-minus-compact", C("Time", s), {"s": "2013-01-01T05:17:00-0500"}, T0),
    ("time-offset-hours", C("Time", s), {"s": "2013-01-01T15:47:00+05:30"}, T0),
    ("time-offset-hh", C("Time", s), {"s": "2013-01-01T11:17:00+01"}, T0),
    ("time-no-seconds", C("Time", s), {"s": "2013-01-01T10:17Z"}, T0),
    ("time-date-only", C("Time", s), {"s": "2013-01-01"}, T0 - (10 * 3600 + 17 * 60) * 1000),
    ("time-pre-1970", C("Time", s), {"s": "1969-12-31T23:59:59.999Z"}, -1),
    ("time-1900", C("Time", s), {"s": "1900-03-01T00:00:00Z"}, -2_203_891_200_000),
    ("time-leap-day", C("Time", s), {"s": "2024-02-29T12:00:00Z"}, 1_709_208_000_000),
    ("time-leap-2000", C("Time", s), {"s": "2000-02-29T00:00:00Z"}, 951_782_400_000),
    ("time-not-leap-2023", C("Time", s), {"s": "2023-02-29T00:00:00Z"}, ERROR),
    ("time-not-leap-1900", C("Time", s), {"s": "1900-02-29T00:00:00Z"}, ERROR),
    ("time-end-of-year", C("Time", s), {"s": "2012-12-31T23:59:59.999Z"}, T0 - 36_000_001 - 17 * 60_000),
    ("time-year-0", C("Time", s), {"s": "0000-01-01T00:00:00Z"}, MIN_TIME_MS),
    ("time-year-9999", C("Time", s), {"s": "9999-12-31T23:59:59.999Z"}, MAX_TIME_MS),
    ("time-bad-month", C("Time", s), {"s": "2013-13-01"}, ERROR),
    ("time-bad-day", C("Time", s), {"s": "2013-04-31"}, ERROR),
    ("time-bad-hour", C("Time", s), {"s": "2013-01-01T24:00:00Z"}, ERROR),
    ("time-bad-second", C("Time", s), {"s": "2013-01-01T10:17:60Z"}, ERROR),
    ("time-bad-offset", C("Time", s), {"s": "2013-01-01T10:17:00+24:00"}, ERROR),
    ("time-max-offset", C("Time", s), {"s": "2013-01-02T04:17:00+18:00"}, T0),
    ("time-offset-too-big", C("Time", s), {"s": "2013-01-02T04:18:00+18:01"}, ERROR),
    ("time-garbage", C("Time", s), {"s": "yesterday"}, ERROR),
    ("time-empty", C("Time", s), {"s": ""}, ERROR),
    ("time-trailing-newline", C("Time", s), {"s": "2013-01-01\n"}, ERROR),
    ("time-leading-space", C("Time", s), {"s": " 2013-01-01"}, ERROR),
    ("time-null", C("Time", s), {}, None),
    ("time-null-literal", C("Time", NULL), {}, None),
    ("time-epoch-ms-string", C("Time", s), {"s": "1357035420000"}, T0),
    ("time-epoch-ms-float-string", C("Time", s), {"s": "1.5e3"}, 1500),
    ("time-epoch-ms-negative", C("Time", s), {"s": "-1.5"}, -2),
    ("parsetime", C("ParseTime", s), {"s": "2013-01-01T10:17:00.000Z"}, T0),
    ("parsetime-bad", C("ParseTime", s), {"s": "2013-01-01T10:17:00.000Q"}, ERROR),
    # -------------------------------------------------------- FromUnixSeconds
    ("fromunix-int", C("FromUnixSeconds", i), {"i": 1_357_035_420}, T0),
    ("fromunix-neg-int", C("FromUnixSeconds", i), {"i": -1}, -1000),
    ("fromunix-float", C("FromUnixSeconds", f), {"f": 1.5}, 1500),
    ("fromunix-float-neg", C("FromUnixSeconds", f), {"f": -1.5}, -1500),
    ("fromunix-float-floor", C("FromUnixSeconds", f), {"f": 0.0015}, 1),
    ("fromunix-float-floor-neg", C("FromUnixSeconds", f), {"f": -0.0015}, -2),
    ("fromunix-overflow", C("FromUnixSeconds", i), {"i": 1 << 62}, ERROR),
    ("fromunix-float-overflow", C("FromUnixSeconds", f), {"f": 1e300}, ERROR),
    ("fromunix-null", C("FromUnixSeconds", i), {}, None),
    # ------------------------------------------------------- duration units
    ("days", C("Days", d), {"d": 172_800.0}, 2.0),
    ("hours", C("Hours", d), {"d": 5400.0}, 1.5),
    ("minutes", C("Minutes", d), {"d": 90.0}, 1.5),
    ("seconds", C("Seconds", d), {"d": 2.5}, 2.5),
    ("days-negative", C("Days", d), {"d": -43_200.0}, -0.5),
    ("days-of-difference", C("Days", O("sub", t, t2)), {"t": T0, "t2": T0 - 86_400_000 * 3}, 3.0),
    ("days-null", C("Days", d), {}, None),
    # -------------------------------------------------------------------- Len
    ("len", C("Len", s), {"s": "abc"}, 3),
    ("len-empty", C("Len", s), {"s": ""}, 0),
    ("len-astral", C("Len", s), {"s": "😀é"}, 2),
    ("len-combining", C("Len", s), {"s": "e\u0301"}, 2),
    ("len-null", C("Len", s), {}, None),
    # ------------------------------------------------------ Maximum / Minimum
    ("maximum", C("Maximum", i, j, L(2)), {"i": 1, "j": 3}, 3),
    ("maximum-promote", C("Maximum", i, f), {"i": 1, "f": 2.5}, 2.5),
    ("maximum-promote-int-wins", C("Maximum", i, f), {"i": 3, "f": 2.5}, 3.0),
    ("maximum-null", C("Maximum", i, j), {"i": 1}, None),
    ("maximum-string", C("Maximum", s, u), {"s": "a", "u": "é"}, "é"),
    ("maximum-time", C("Maximum", t, t2), {"t": -5, "t2": 7}, 7),
    ("maximum-single", C("Maximum", i), {"i": 3}, 3),
    ("minimum", C("Minimum", i, j), {"i": -1, "j": -2}, -2),
    ("minimum-string", C("Minimum", s, u), {"s": "Z", "u": "a"}, "Z"),
    ("minimum-null", C("Minimum", NULL, L(1)), {}, None),
    # ----------------------------------------------------------- Lower / Upper
    ("lower", C("Lower", s), {"s": "AbC"}, "abc"),
    ("lower-accent", C("Lower", s), {"s": "ÉCOLE"}, "école"),
    ("lower-dotted-i", C("Lower", s), {"s": "İ"}, "i\u0307"),
    ("lower-final-sigma", C("Lower", s), {"s": "ΣΑΣ"}, "σας"),
    ("upper", C("Upper", s), {"s": "abc"}, "ABC"),
    ("upper-sharp-s", C("Upper", s), {"s": "straße"}, "STRASSE"),
    ("upper-ligature", C("Upper", s), {"s": "ﬁ"}, "FI"),
    ("upper-null", C("Upper", s), {}, None),
    # ------------------------------------------ Contains / StartsWith / EndsWith
    ("contains", C("Contains", s, u), {"s": "hello", "u": "ell"}, True),
    ("contains-empty", C("Contains", s, u), {"s": "hello", "u": ""}, True),
    ("contains-miss", C("Contains", s, u), {"s": "hello", "u": "xyz"}, False),
    ("contains-unicode", C("Contains", s, u), {"s": "a😀b", "u": "😀"}, True),
    ("contains-null-s", C("Contains", s, u), {"u": "a"}, None),
    ("contains-null-sub", C("Contains", s, u), {"s": "a"}, None),
    ("startswith", C("StartsWith", s, u), {"s": "hello", "u": "he"}, True),
    ("startswith-miss", C("StartsWith", s, u), {"s": "hello", "u": "lo"}, False),
    ("startswith-case", C("StartsWith", s, u), {"s": "Hello", "u": "he"}, False),
    ("endswith", C("EndsWith", s, u), {"s": "hello", "u": "lo"}, True),
    ("endswith-unicode", C("EndsWith", s, u), {"s": "café", "u": "é"}, True),
    ("endswith-null", C("EndsWith", s, u), {"u": "lo"}, None),
    # ------------------------------------------------------ Split / Trim / Replace
    ("split", C("Split", s, u), {"s": "ann@mail.example.com", "u": "@"}, ["ann", "mail.example.com"]),
    ("split-domain", AT(C("Split", s, L("@")), L(-1)), {"s": "ann@mail.example.com"}, "mail.example.com"),
    ("split-empty-parts", C("Split", s, L(",")), {"s": ",a,,b,"}, ["", "a", "", "b", ""]),
    ("split-missing", C("Split", s, L("@")), {"s": "no-at"}, ["no-at"]),
    ("split-empty-text", C("Split", s, L("@")), {"s": ""}, [""]),
    ("split-long-sep", C("Split", s, u), {"s": "a--b---c", "u": "--"}, ["a", "b", "-c"]),
    ("split-regex-chars", C("Split", s, L(".")), {"s": "a.b.c"}, ["a", "b", "c"]),
    ("split-regex-chars-column", C("Split", s, u), {"s": "a|b*c|b*", "u": "|b*"}, ["a", "c", ""]),
    ("split-quote-end", C("Split", s, u), {"s": "x\\Ey\\Ez", "u": "\\E"}, ["x", "y", "z"]),
    ("split-quote-end-literal", C("Split", s, L("\\E")), {"s": "x\\Ey"}, ["x", "y"]),
    ("split-empty-sep", C("Split", s, u), {"s": "a😀é", "u": ""}, ["a", "😀", "é"]),
    ("split-empty-sep-literal", C("Split", s, L("")), {"s": "ab"}, ["a", "b"]),
    ("split-empty-both", C("Split", s, u), {"s": "", "u": ""}, [""]),
    ("split-unicode", C("Split", s, u), {"s": "x😀y😀", "u": "😀"}, ["x", "y", ""]),
    ("split-len", C("Len", C("Split", s, L("@"))), {"s": "a@b@c"}, 3),
    ("split-out-of-range", AT(C("Split", s, L("@")), L(2)), {"s": "a@b"}, None),
    ("split-null-s", C("Split", s, u), {"u": "@"}, None),
    ("split-null-sep", C("Split", s, u), {"s": "a@b"}, None),
    ("trim", C("Trim", s), {"s": " \t ab c\r\n "}, "ab c"),
    ("trim-nothing", C("Trim", s), {"s": "abc"}, "abc"),
    ("trim-all", C("Trim", s), {"s": " \n\t"}, ""),
    ("trim-keeps-unicode-space", C("Trim", s), {"s": "\u00a0a\u2003"}, "\u00a0a\u2003"),
    ("trim-keeps-other-controls", C("Trim", s), {"s": "\x0ba\x0c"}, "\x0ba\x0c"),
    ("trim-null", C("Trim", s), {}, None),
    ("replace", C("Replace", s, u, L("")), {"s": "a.n.n@x.com", "u": "."}, "ann@xcom"),
    ("replace-longer", C("Replace", s, L("ab"), L("xyz")), {"s": "abcabc"}, "xyzcxyzc"),
    ("replace-left-to-right", C("Replace", s, L("aa"), L("b")), {"s": "aaa"}, "ba"),
    ("replace-regex-chars", C("Replace", s, L(".*"), L("$1")), {"s": "a.*b"}, "a$1b"),
    ("replace-empty-old", C("Replace", s, u, L("x")), {"s": "ab", "u": ""}, "ab"),
    ("replace-unicode", C("Replace", s, u, L("é")), {"s": "e😀e", "u": "😀"}, "eée"),
    ("replace-miss", C("Replace", s, u, L("x")), {"s": "abc", "u": "z"}, "abc"),
    ("replace-null-new", C("Replace", s, u, C("Lower", L(None, "string"))), {"s": "abc", "u": "b"}, None),
    ("replace-null-s", C("Replace", s, u, L("x")), {"u": "b"}, None),
    # ------------------------------------------------------------- Coalesce
    ("coalesce", C("Coalesce", i, L(1)), {}, 1),
    ("coalesce-first", C("Coalesce", i, L(1)), {"i": 7}, 7),
    ("coalesce-all-null", C("Coalesce", i, j), {}, None),
    ("coalesce-lazy", C("Coalesce", i, O("floordiv", L(1), j)), {"i": 1, "j": 0}, 1),
    ("coalesce-reaches-error", C("Coalesce", i, O("floordiv", L(1), j)), {"j": 0}, ERROR),
    ("coalesce-first-error", C("Coalesce", O("floordiv", L(1), j), L(2)), {"j": 0}, ERROR),
    ("coalesce-promote", C("Coalesce", i, f), {"i": 3, "f": 2.5}, 3.0),
    ("coalesce-three", C("Coalesce", s, u, L("z")), {}, "z"),
    # ------------------------------------------------------------------- If
    ("if-true", C("If", b, L(1), L(2)), {"b": True}, 1),
    ("if-false", C("If", b, L(1), L(2)), {"b": False}, 2),
    ("if-null", C("If", b, L(1), L(2)), {}, 2),
    ("if-guard-zero", C("If", O("eq", i, L(0)), L(0), O("div", L(10), i)), {"i": 0}, 0.0),
    ("if-guard-nonzero", C("If", O("eq", i, L(0)), L(0), O("div", L(10), i)), {"i": 5}, 2.0),
    ("if-promote", C("If", b, L(1), L(2.5)), {"b": True}, 1.0),
    ("if-cond-error", C("If", O("gt", ZERO_DIV, L(0)), L(1), L(2)), {}, ERROR),
    ("if-branch-error", C("If", b, ZERO_DIV, L(2.0)), {"b": True}, ERROR),
    ("if-null-branch", C("If", b, NULL, s), {"b": True, "s": "x"}, None),
    # -------------------------------------------------------------------- Int
    ("int-float-trunc", C("Int", f), {"f": 2.9}, 2),
    ("int-float-trunc-neg", C("Int", f), {"f": -2.9}, -2),
    ("int-float-too-big", C("Int", f), {"f": 1e19}, ERROR),
    ("int-float-min", C("Int", f), {"f": -9.223372036854775808e18}, INT64_MIN),
    ("int-float-inf", C("Int", O("mul", f, L(10.0))), {"f": 1e308}, ERROR),
    ("int-string", C("Int", s), {"s": "42"}, 42),
    ("int-string-neg", C("Int", s), {"s": "-7"}, -7),
    ("int-string-plus", C("Int", s), {"s": "+5"}, 5),
    ("int-string-leading-zero", C("Int", s), {"s": "007"}, 7),
    ("int-string-float", C("Int", s), {"s": "4.7"}, 4),
    ("int-string-exp", C("Int", s), {"s": "1e3"}, 1000),
    ("int-string-max", C("Int", s), {"s": "9223372036854775807"}, INT64_MAX),
    ("int-string-too-big", C("Int", s), {"s": "9223372036854775808"}, ERROR),
    ("int-string-garbage", C("Int", s), {"s": "x"}, ERROR),
    ("int-string-space", C("Int", s), {"s": " 5"}, ERROR),
    ("int-string-empty", C("Int", s), {"s": ""}, ERROR),
    ("int-bool", C("Int", b), {"b": True}, 1),
    ("int-null", C("Int", NULL), {}, None),
    ("int-null-ref", C("Int", s), {}, None),
    # ------------------------------------------------------------------ Float
    ("float-int", C("Float", i), {"i": 2}, 2.0),
    ("float-big-int", C("Float", i), {"i": (1 << 53) + 1}, 9007199254740992.0),
    ("float-string", C("Float", s), {"s": "2.5"}, 2.5),
    ("float-string-dot", C("Float", s), {"s": ".5"}, 0.5),
    ("float-string-trailing-dot", C("Float", s), {"s": "5."}, 5.0),
    ("float-string-exp", C("Float", s), {"s": "-1.5E-3"}, -0.0015),
    ("float-string-overflow", C("Float", s), {"s": "1e400"}, INF),
    ("float-string-garbage", C("Float", s), {"s": "abc"}, ERROR),
    ("float-string-nan", C("Float", s), {"s": "nan"}, ERROR),
    ("float-string-java-suffix", C("Float", s), {"s": "1d"}, ERROR),
    ("float-bool", C("Float", b), {"b": True}, 1.0),
    ("float-null", C("Float", s), {}, None),
    # ----------------------------------------------------------------- String
    ("string-int", C("String", i), {"i": 42}, "42"),
    ("string-int-neg", C("String", i), {"i": -7}, "-7"),
    ("string-int-min", C("String", i), {"i": INT64_MIN}, "-9223372036854775808"),
    ("string-float", C("String", f), {"f": 2.5}, "2.5"),
    ("string-float-whole", C("String", f), {"f": 1.0}, "1.0"),
    ("string-float-hundred", C("String", f), {"f": 100.0}, "100.0"),
    ("string-float-sum", C("String", O("add", f, g)), {"f": 0.1, "g": 0.2}, "0.30000000000000004"),
    ("string-float-1e15", C("String", f), {"f": 1e15}, "1000000000000000.0"),
    ("string-float-1e16", C("String", f), {"f": 1e16}, "1e+16"),
    ("string-float-1e22", C("String", f), {"f": 1e22}, "1e+22"),
    ("string-float-big", C("String", f), {"f": 123456789012345680.0}, "1.2345678901234568e+17"),
    ("string-float-small", C("String", f), {"f": 1.5e-7}, "1.5e-07"),
    ("string-float-1e-4", C("String", f), {"f": 0.0001}, "0.0001"),
    ("string-float-1e-5", C("String", f), {"f": -2.5e-5}, "-2.5e-05"),
    ("string-float-millis", C("String", f), {"f": 0.001}, "0.001"),
    ("string-float-frac", C("String", f), {"f": 123456.789}, "123456.789"),
    ("string-float-7digits", C("String", f), {"f": 12345678.5}, "12345678.5"),
    ("string-float-neg-zero", C("String", f), {"f": -0.0}, "-0.0"),
    ("string-float-zero", C("String", f), {"f": 0.0}, "0.0"),
    ("string-float-e300", C("String", f), {"f": 1e300}, "1e+300"),
    ("string-float-e-300", C("String", f), {"f": 2.5e-300}, "2.5e-300"),
    ("string-float-inf", C("String", O("mul", f, L(10.0))), {"f": 1e308}, "inf"),
    ("string-float-neg-inf", C("String", O("mul", f, L(10.0))), {"f": -1e308}, "-inf"),
    ("string-duration", C("String", d), {"d": 90.5}, "90.5"),
    ("string-bool", C("String", b), {"b": True}, "true"),
    ("string-bool-false", C("String", b), {"b": False}, "false"),
    ("string-time", C("String", t), {"t": T0}, "2013-01-01T10:17:00.000Z"),
    ("string-time-ms", C("String", t), {"t": T0 + 7}, "2013-01-01T10:17:00.007Z"),
    ("string-time-pre-1970", C("String", t), {"t": -1}, "1969-12-31T23:59:59.999Z"),
    ("string-time-moon", C("String", C("Time", s)), {"s": "1969-07-20T20:17:40Z"}, "1969-07-20T20:17:40.000Z"),
    ("string-time-epoch", C("String", t), {"t": 0}, "1970-01-01T00:00:00.000Z"),
    ("string-time-year-0", C("String", t), {"t": MIN_TIME_MS}, "0000-01-01T00:00:00.000Z"),
    ("string-time-year-9999", C("String", t), {"t": MAX_TIME_MS}, "9999-12-31T23:59:59.999Z"),
    ("string-time-too-late", C("String", t), {"t": MAX_TIME_MS + 1}, ERROR),
    ("string-time-too-early", C("String", t), {"t": MIN_TIME_MS - 1}, ERROR),
    ("string-time-min-int", C("String", t), {"t": INT64_MIN}, ERROR),
    ("string-time-leap-day", C("String", O("add", C("Time", s), D(7200))), {"s": "2024-02-28T23:00:00Z"},
     "2024-02-29T01:00:00.000Z"),
    ("string-time-new-year", C("String", O("add", t, D(0.001))), {"t": _time_ms("2012-12-31T23:59:59.999Z")},
     "2013-01-01T00:00:00.000Z"),
    ("string-time-1600", C("String", t), {"t": _time_ms("1600-02-29T12:34:56.789Z")}, "1600-02-29T12:34:56.789Z"),
    ("string-time-fromunix", C("String", C("FromUnixSeconds", i)), {"i": -1}, "1969-12-31T23:59:59.000Z"),
    ("string-null", C("String", i), {}, None),
    # ------------------------------------------------------------------- Bool
    ("bool-string-true", C("Bool", s), {"s": "true"}, True),
    ("bool-string-false-upper", C("Bool", s), {"s": "FALSE"}, False),
    ("bool-string-bad", C("Bool", s), {"s": "yes"}, ERROR),
    ("bool-int-zero", C("Bool", i), {"i": 0}, False),
    ("bool-int", C("Bool", i), {"i": -2}, True),
    ("bool-float", C("Bool", f), {"f": 0.0}, False),
    ("bool-null", C("Bool", i), {}, None),
    # ----------------------------------------------------------- combinations
    ("mixed-arith", O("mul", O("add", i, f), L(2)), {"i": 1, "f": 0.25}, 2.5),
    ("mixed-precedence", O("sub", i, O("mul", j, L(3))), {"i": 10, "j": 2}, 4),
    ("mixed-null-propagates-deep", O("add", O("mul", i, j), L(1)), {"i": 2}, None),
    ("mixed-error-deep", O("add", L(1), O("mul", L(2), O("floordiv", i, j))), {"i": 1, "j": 0}, ERROR),
    ("mixed-time-window", O("lt", O("sub", C("EventTime"), t), D(3600)), {"t": T0 - 60_000}, True),
    ("mixed-string-build", O("add", C("Upper", s), C("String", i)), {"s": "id-", "i": 7}, "ID-7"),
    ("mixed-len-compare", O("ge", C("Len", s), L(3)), {"s": "ab😀"}, True),
    ("mixed-coalesce-time", C("String", C("Coalesce", t, C("EventTime"))), {}, "2013-01-01T10:17:00.000Z"),
    # ------------------------------------------------------ struct field (x.name)
    ("field-string", FIELD(p, "ip"), {"p": P1}, "1.1.1.1"),
    ("field-float", FIELD(p, "amount"), {"p": P1}, 2.5),
    ("field-time", FIELD(p, "at"), {"p": P1}, T0 - 60_000),
    ("field-time-arith", O("sub", C("EventTime"), FIELD(p, "at")), {"p": P1}, 60.0),
    ("field-compare", O("gt", FIELD(p, "amount"), L(2)), {"p": P1}, True),
    ("field-unicode", FIELD(p, "ip"), {"p": {**P1, "ip": "é😀"}}, "é😀"),
    ("field-empty-string", FIELD(p, "ip"), {"p": {**P1, "ip": ""}}, ""),
    ("field-null-struct", FIELD(p, "ip"), {}, None),
    ("field-null-value", FIELD(p, "amount"), {"p": {**P1, "amount": None}}, None),
    ("field-null-literal", FIELD(NULL, "ip"), {}, None),
    ("field-is-null", O("is_null", FIELD(p, "ip")), {}, True),
    ("field-coalesce", C("Coalesce", FIELD(p, "amount"), L(0)), {}, 0.0),
    ("field-string-of-time", C("String", FIELD(p, "at")), {"p": P1}, "2013-01-01T10:16:00.000Z"),
    ("field-of-item", FIELD(AT(ss, L(-1)), "ip"), {"ss": SS}, "é😀"),
    ("field-of-missing-item", FIELD(AT(ss, L(2)), "n"), {"ss": SS}, None),
    # ----------------------------------------------------- array index (x[i])
    ("index-first", AT(q, L(0)), {"q": Q3}, "a"),
    ("index-middle", AT(q, L(1)), {"q": Q3}, "b"),
    ("index-last-literal", AT(q, L(-1)), {"q": Q3}, "c"),
    ("index-last-neg", AT(q, O("neg", L(1))), {"q": Q3}, "c"),
    ("index-neg-first", AT(q, i), {"q": Q3, "i": -3}, "a"),
    ("index-past-end", AT(q, i), {"q": Q3, "i": 3}, None),
    ("index-before-start", AT(q, i), {"q": Q3, "i": -4}, None),
    ("index-int64-max", AT(q, i), {"q": Q3, "i": INT64_MAX}, None),
    ("index-int64-min", AT(q, i), {"q": Q3, "i": INT64_MIN}, None),
    ("index-int32-wrap", AT(q, i), {"q": Q3, "i": 1 << 32}, None),
    ("index-int32-wrap-neg", AT(q, i), {"q": Q3, "i": -(1 << 32) + 1}, None),
    ("index-empty", AT(q, L(0)), {"q": []}, None),
    ("index-empty-neg", AT(q, L(-1)), {"q": []}, None),
    ("index-null-array", AT(q, L(0)), {}, None),
    ("index-null-array-neg", AT(q, i), {"i": INT64_MIN}, None),
    ("index-null-index", AT(q, i), {"q": Q3}, None),
    ("index-null-literal-index", AT(q, NULL), {"q": Q3}, None),
    ("index-null-literal-array", AT(NULL, L(0)), {}, None),
    ("index-null-item", AT(q, L(1)), {"q": ["a", None]}, None),
    ("index-unicode", AT(q, L(1)), {"q": ["é", "😀", "𝔘"]}, "😀"),
    ("index-unicode-last", AT(q, L(-1)), {"q": ["é", "😀", "𝔘"]}, "𝔘"),
    ("index-computed", AT(q, O("sub", C("Len", q), L(1))), {"q": Q3}, "c"),
    ("index-int-items", O("add", AT(ns, L(0)), AT(ns, L(-1))), {"ns": [1, 2, 40]}, 41),
    ("index-int-item-min", AT(ns, i), {"ns": [INT64_MIN, 0], "i": -2}, INT64_MIN),
    ("index-time-item", C("String", AT(ts, L(-1))), {"ts": [0, T0]}, "2013-01-01T10:17:00.000Z"),
    ("index-time-item-pre-1970", AT(ts, L(0)), {"ts": [-1, T0]}, -1),
    ("index-error-index", AT(q, O("floordiv", L(1), j)), {"q": Q3, "j": 0}, ERROR),
    ("index-error-reached", C("Coalesce", AT(ns, L(5)), O("floordiv", L(1), j)), {"ns": [1], "j": 0}, ERROR),
    ("index-error-lazy", C("Coalesce", AT(ns, L(0)), O("floordiv", L(1), j)), {"ns": [1], "j": 0}, 1),
    ("index-is-null-out-of-range", O("is_null", AT(q, L(5))), {"q": Q3}, True),
    ("index-coalesce-out-of-range", C("Coalesce", AT(q, L(5)), L("none")), {"q": Q3}, "none"),
    ("index-struct-item", AT(ss, L(0)), {"ss": SS}, {"ip": "a", "n": 1}),
    ("index-struct-item-null", AT(ss, L(0)), {"ss": []}, None),
    # ----------------------------------------------------- tuple index (x[k])
    ("tuple-first", AT(tp, L(0)), {"tp": ["1.1.1.1", 7]}, "1.1.1.1"),
    ("tuple-second", AT(tp, L(1)), {"tp": ["1.1.1.1", 7]}, 7),
    ("tuple-unicode", AT(tp, L(0)), {"tp": ["é😀", 7]}, "é😀"),
    ("tuple-null", AT(tp, L(1)), {}, None),
    ("tuple-spark-layout-by-position", AT(tv, L(1)), {"tv": ["x", 5]}, 5),
    ("tuple-of-set-first", AT(AT(ps, L(0)), L(0)), {"ps": PS}, "a"),
    ("tuple-of-set-last", AT(AT(ps, L(-1)), L(1)), {"ps": PS}, 2),
    ("tuple-of-missing-item", AT(AT(ps, L(2)), L(1)), {"ps": PS}, None),
    ("tuple-of-null-set", AT(AT(ps, L(0)), L(0)), {}, None),
    ("tuple-set-item-whole", AT(ps, L(1)), {"ps": PS}, ["b", 2]),
    # ---------------------------------------------------------- Len of arrays
    ("len-array", C("Len", q), {"q": Q3}, 3),
    ("len-array-empty", C("Len", q), {"q": []}, 0),
    ("len-array-null", C("Len", q), {}, None),
    ("len-array-unicode-items", C("Len", q), {"q": ["😀é", "𝔘"]}, 2),
    ("len-of-item", C("Len", AT(q, L(0))), {"q": ["😀é", "𝔘"]}, 2),
    ("len-array-of-structs", C("Len", ss), {"ss": SS}, 2),
    ("len-array-of-tuples", C("Len", ps), {"ps": PS}, 2),
    ("len-array-with-null-item", C("Len", q), {"q": [None, "a"]}, 2),
]
