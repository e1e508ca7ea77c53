"""Grammar and expression IR: precedence, literals, inputs, built-ins (SPEC §2.2, §2.3)."""

from __future__ import annotations

import logging

import pytest
from lark import Lark, logger

from compiler.plan import OPERATORS, Expr
from compiler.functions import AGGREGATES, SCALAR_FUNCTIONS

from _compiler_helpers import compile_err, compile_ok


def expr_of(src: str, prelude: str = "") -> Expr:
    plan = compile_ok(f"event e\n{prelude}\nx := {src}\n")
    return plan.events["e"].feature("x").expr


def shape(e: Expr) -> object:
    """Compact tree: literals as values, refs as names, ops as (op, args...)."""
    if e.kind == "lit":
        return e.value
    if e.kind == "ref":
        return e.name
    if e.kind == "list":
        return [shape(a) for a in e.args]
    return (e.op, *[shape(a) for a in e.args])


INTS = "a := $.a as int\nb := $.b as int\nc := $.c as int\nd := $.d as int"
BOOLS = "p := $.p as bool\nq := $.q as bool\nr := $.r as bool"


def test_grammar_has_no_conflicts(caplog: pytest.LogCaptureFixture) -> None:
    logger.setLevel(logging.DEBUG)
    try:
        with caplog.at_level(logging.DEBUG, logger="lark"):
            Lark.open("../../compiler/grammar.lark", rel_to=__file__, parser="lalr", lexer="basic",
                      propagate_positions=True, maybe_placeholders=True, debug=True)
    finally:
        logger.setLevel(logging.WARNING)
    assert not [r for r in caplog.records if "conflict" in r.getMessage().lower()]


@pytest.mark.parametrize("src, want", [
    ("a + b * c", ("add", "a", ("mul", "b", "c"))),
    ("a - b - c", ("sub", ("sub", "a", "b"), "c")),
    ("-a * b", ("mul", ("neg", "a"), "b")),
    ("~a + b", ("add", ("bitnot", "a"), "b")),
    ("a // b % c", ("mod", ("floordiv", "a", "b"), "c")),
    ("a << b + c", ("shl", "a", ("add", "b", "c"))),
    ("a >> 1 & b", ("bitand", ("shr", "a", 1), "b")),
    ("a & b ^ c | d", ("bitor", ("bitxor", ("bitand", "a", "b"), "c"), "d")),
    ("a | b = c", ("eq", ("bitor", "a", "b"), "c")),
    ("a + 1 < b", ("lt", ("add", "a", 1), "b")),
    ("a in (1, 2, 3)", ("in", "a", [1, 2, 3])),
    ("a not in [1]", ("not_in", "a", [1])),
    ("a in (1,)", ("in", "a", [1])),
    ("a is null", ("is_null", "a")),
    ("a + 1 is not null", ("is_not_null", ("add", "a", 1))),
    ("(a + b) * c", ("mul", ("add", "a", "b"), "c")),
    ("a != b", ("ne", "a", "b")),
    ("a <= b", ("le", "a", "b")),
    ("a >= b", ("ge", "a", "b")),
    ("a > b", ("gt", "a", "b")),
])
def test_int_precedence(src: str, want: object) -> None:
    assert shape(expr_of(src, INTS)) == want


@pytest.mark.parametrize("src, want", [
    ("not p and q", ("and", ("not", "p"), "q")),
    ("p or q and r", ("or", "p", ("and", "q", "r"))),
    ("not p = q", ("not", ("eq", "p", "q"))),
    ("p and not q or r", ("or", ("and", "p", ("not", "q")), "r")),
    ("p and null", ("and", "p", None)),
])
def test_bool_precedence(src: str, want: object) -> None:
    e = expr_of(src, BOOLS)
    assert shape(e) == want and e.type == "bool"


def test_every_operator_name_is_known() -> None:
    e = expr_of("If(s ~= '^a', 1, 2) + Len(s)", "s := $.s as string")
    ops = set()
    stack = [e]
    while stack:
        x = stack.pop()
        if x.kind == "op":
            ops.add(x.op)
        stack.extend(x.args)
    assert ops <= set(OPERATORS) and "match" in expr_of("s ~= 'a'", "s := $.s as string").op


@pytest.mark.parametrize("src, kind, value", [
    ("10 minutes", "duration", 600.0),
    ("1 minute", "duration", 60.0),
    ("2.5 hours", "duration", 9000.0),
    ("week", "duration", 604800.0),
    ("day", "duration", 86400.0),
    ("3 seconds", "duration", 3.0),
    ("PT5H30M", "duration", 19800.0),
    ("P1DT12H", "duration", 129600.0),
    ("PT0.5S", "duration", 0.5),
    ("42", "int", 42),
    ("4.5", "float", 4.5),
    ("1e3", "float", 1000.0),
    ("'it\\'s'", "string", "it's"),
    ('"a\\nb"', "string", "a\nb"),
    ("'\\u00e9'", "string", "é"),
    ("true", "bool", True),
    ("false", "bool", False),
    ("null", "null", None),
])
def test_literals(src: str, kind: str, value: object) -> None:
    e = expr_of(src)
    assert e == Expr("lit", kind, value=value)


@pytest.mark.parametrize("src, typ", [
    ("t - t", "duration"), ("t + 1 hour", "time"), ("1 hour + t", "time"), ("t - 1 day", "time"),
    ("1 hour + 30 minutes", "duration"), ("2 * 1 hour", "duration"), ("1 hour * 1.5", "duration"),
    ("1 hour / 2", "duration"), ("1 hour / 1 minute", "float"),
    ("i / i", "float"), ("i // i", "int"), ("f // i", "float"), ("i % i", "int"), ("i + f", "float"),
    ("s + s", "string"), ("i < f", "bool"), ("s < s", "bool"), ("t < t", "bool"),
    ("null + 1", "int"), ("null", "null"), ("-1 hour", "duration"), ("i & 3", "int"),
    ("EventTime()", "time"), ("Time('2021-01-01T00:00:00Z')", "time"), ("Time(null)", "time"),
    ("ParseTime(s)", "time"), ("FromUnixSeconds(i)", "time"), ("Days(t - t)", "float"),
    ("Hours(1 day)", "float"), ("Seconds(1 day)", "float"), ("Len(s)", "int"), ("Length(s)", "int"),
    ("Maximum(i, f)", "float"), ("Minimum(i, i, 3)", "int"), ("Maximum(t, t)", "time"),
    ("Lower(s)", "string"), ("Upper(s)", "string"), ("Contains(s, 'a')", "bool"),
    ("StartsWith(s, 'a')", "bool"), ("EndsWith(s, 'a')", "bool"), ("Coalesce(null, i, f)", "float"),
    ("Coalesce(s, 'x')", "string"), ("If(b, i, null)", "int"), ("If(b, 1, 2.5)", "float"),
    ("Int(s)", "int"), ("Int(null)", "int"), ("Float(i)", "float"), ("String(t)", "string"),
    ("Bool('true')", "bool"), ("s in ('a', 'b')", "bool"), ("i in (1, 2.5)", "bool"),
])
def test_types(src: str, typ: str) -> None:
    prelude = "i := $.i as int\nf := $.f as float\ns := $.s as string\nt := $.t as time\nb := $.b as bool"
    assert expr_of(src, prelude).type == typ


def test_canonical_names_and_promotion() -> None:
    prelude = "s := $.s as string\ni := $.i as int\nf := $.f as float\nb := $.b as bool"
    assert expr_of("Length(s)", prelude).op == "Len"
    e = expr_of("If(b, 1, f)", prelude)
    assert e.args[1] == Expr("lit", "float", value=1.0)
    e = expr_of("Coalesce(i, f)", prelude)
    assert e.args[0] == Expr("call", "float", op="Float", args=(Expr("ref", "int", name="i"),))
    e = expr_of("f in (1, 2.5)", prelude)
    assert e.args[1] == Expr("list", "array<float>", args=(Expr("lit", "float", value=1.0),
                                                           Expr("lit", "float", value=2.5)))


def test_inputs() -> None:
    plan = compile_ok("""
event e
a := $.a.b[0] as int
b := $["odd key"][2] as string?
c := $.c as float ? 0
d := $.d as time ? '2021-04-12T22:43:46Z'
e2 := $.e as bool ? false
f := $.f as string ? null
g := $.g as int ? -5
h := $.h as time ? 1000
""")
    ev = plan.events["e"]
    assert ev.feature("a").input.path == ("a", "b", 0) and not ev.feature("a").input.optional
    assert ev.feature("b").input.path == ("odd key", 2) and ev.feature("b").input.optional
    c = ev.feature("c").input
    assert c.default == 0.0 and isinstance(c.default, float) and c.has_default
    assert ev.feature("d").input.default == 1618267426000
    assert ev.feature("e2").input.default is False and ev.feature("e2").input.has_default
    assert ev.feature("f").input.optional and not ev.feature("f").input.has_default
    assert ev.feature("g").input.default == -5
    assert ev.feature("h").input.default == 1000
    assert ev.feature("d").type == "time"


def test_comments_and_reserved_words() -> None:
    plan = compile_ok("""
-- a comment
event e -- trailing
x := 1 -- one
  -- indented comment
y := x--2
days_ago := 3 days
""")
    assert plan.events["e"].feature("y").expr == Expr("ref", "int", name="x")
    assert plan.events["e"].feature("days_ago").type == "duration"
    res = compile_err("event e\nday := 1\n")
    assert res.diagnostics[0].code == "E0104"


def test_scoped_call_does_not_eat_comparisons() -> None:
    e = expr_of("If(a<b, c>(d), true)", INTS)
    assert shape(e)[1:3] == (("lt", "a", "b"), ("gt", "c", "d"))


def test_multiline_statements() -> None:
    plan = compile_ok("""
event e
k := $.k as string
a := $.a as int
n := Count(
    by k
    where a
      = 1
    last 1 day
)
""")
    assert plan.events["e"].feature("n").aggregate.window_s == 86400


def test_function_tables_are_consistent() -> None:
    assert not set(SCALAR_FUNCTIONS) & set(AGGREGATES)
    assert len(AGGREGATES) == 16
    for a in AGGREGATES.values():
        assert a.min_values <= (a.max_values if a.max_values is not None else 99)


def test_a_syntax_error_is_not_kept_alive_after_its_compile() -> None:
    """A compile's syntax error and its frames are freed once the compile returns.

    The matcher raises errors it parsed once per process (``compiler.parser._example_errors``);
    a raise ties each to the frame that held the user's error, which the cache must not keep.
    """
    import gc

    from lark.exceptions import UnexpectedInput

    from compiler.parser import _example_errors

    result = compile_err("event e\nx := 1 +\ny := = 2\n")
    assert {d.code for d in result.diagnostics} & {"E0101", "E0102", "E0103", "E0105"}
    gc.collect()
    stored = {id(error) for error in _example_errors().values()}
    alive = [o for o in gc.get_objects() if isinstance(o, UnexpectedInput) and id(o) not in stored]
    assert alive == []
