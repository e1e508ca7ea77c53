"""The Scowl-text target (``compiler.codegen.scowl``): printed expressions check back to the same IR (SPEC §2.3).

Each expression is compiled as a feature, printed, compiled again from the
printed text, and the two typed expressions must be equal; printing is then
a fixed point. The expressions cover every operator level of the ladder
(parentheses only where needed), unary chains, ``in`` lists, ``is null``,
field and index access, calls, and every literal kind; then every scalar
feature and ``where`` filter of the demo topology.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from compiler import compile_dir, compile_sources
from compiler.codegen.scowl import to_scowl

CONTEXT = """event e
a := $.a as int
b := $.b as int
f := $.f as float
s := $.s as string
t := $.t as time
ok := $.ok as bool
p := Latest(a, s by s)
q := Sequence(s by s)
"""

EXPRESSIONS = [
    "a + b * 2", "(a + b) * 2", "a - (b - 1)", "a - b - 1", "a // 2 % 3", "-a + ~b", "-(a + b)",
    "a << 2 | b & 3 ^ 1", "(a | b) & 1", "a = b", "(a = b) = ok", "not a = b", "not (ok and a > 1)",
    "ok and a > 1 or b < 2", "ok and (a > 1 or b < 2)", "a in (1, 2, 3)", "s not in ('x', \"it's\")",
    "s in ('a',)", "a is null", "(a + 1) is not null", "f * 2.5 > 1e300", "f + a", "t - 5 minutes",
    "t + 1.5 hours > t", "Days(EventTime() - t)", "If(ok, s, 'none')", "Coalesce(a, b, 0) + Len(s)",
    "p.s + '\\\\' + q[-1]", "Lower(s) ~= '^[a-z]+$'", "s + 'quote \\' here'", "Time('2013-01-01T00:00:00Z') < t",
    "Maximum(a, b, 3) - Minimum(f, 0.5)", "true and not false", "Int(null)", "a / 0", "-2 * -a",
]


def _expr(text: str):
    res = compile_sources({"x.scowl": CONTEXT + "x := " + text + "\n"})
    assert res.plan is not None, res.render()
    return res.plan.events["e"].feature("x").expr


@pytest.mark.parametrize("text", EXPRESSIONS)
def test_printed_text_checks_back_to_the_same_expression(text):
    e = _expr(text)
    printed = to_scowl(e)
    again = _expr(printed)
    assert again == e, (text, printed)
    assert to_scowl(again) == printed


def test_parentheses_only_where_the_ladder_needs_them():
    assert to_scowl(_expr("(a + b) * 2")) == "(a + b) * 2"
    assert to_scowl(_expr("((a) + (b * 2))")) == "a + b * 2"
    assert to_scowl(_expr("a - (b - 1)")) == "a - (b - 1)"
    assert to_scowl(_expr("(a - b) - 1")) == "a - b - 1"
    assert to_scowl(_expr("not (a = b)")) == "not a = b"


def test_demo_topology_scalars_and_filters():
    plan = compile_dir(Path(__file__).resolve().parents[2] / "examples" / "flights").plan
    seen = 0
    for ev_name, ev in plan.events.items():
        ctx = "".join(f"{f.name} := $.{f.name} as {f.type}\n" for f in ev.features
                      if f.kind == "input")
        for f in ev.features:
            if f.kind == "scalar" and "#" not in to_scowl(f.expr) and all(
                    ev.feature(r).kind == "input" for r in f.expr.refs()):
                res = compile_sources({"x.scowl": f"event {ev_name}\n{ctx}x := {to_scowl(f.expr)}\n"})
                assert res.plan is not None, (f.name, to_scowl(f.expr), res.render())
                assert res.plan.events[ev_name].feature("x").expr == f.expr
                seen += 1
    for st in plan.states.values():
        for w in st.writes.values():
            if w.where is not None:
                assert to_scowl(w.where)
                seen += 1
    assert seen >= 4
