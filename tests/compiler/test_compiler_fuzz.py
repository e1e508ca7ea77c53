"""Fuzz: random and mutated Scowl text never raises and never hits E9999 (SPEC §2.5).

``SCOWL_FUZZ_EXAMPLES`` overrides the number of examples per test (default 1,000
each, 3,000 in total).
"""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler import compile_sources
from compiler.plan import Plan

from _compiler_helpers import DEMO

EXAMPLES = int(os.environ.get("SCOWL_FUZZ_EXAMPLES", "1000"))
FUZZ = settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

CORPUS = [DEMO] + [p.read_text(encoding="utf-8") for p in sorted((Path(__file__).parent / "cases").glob("*.scowl"))]

TOKENS = [
    "event", "e", "f", "x", "y", "k", "t", ":=", "$.a", "$.b[0]", '$["q"]', "as", "int", "float", "string",
    "time", "bool", "?", "0", "1", "2.5", "'s'", '"d"', "true", "false", "null", "+", "-", "*", "/", "//",
    "%", "<<", ">>", "&", "^", "|", "=", "!=", "~=", "<", ">", "<=", ">=", "in", "not", "is", "and", "or",
    "(", ")", "[", "]", ",", ".", "Count", "Sum", "Latest", "Latest<f>", "Count<e, f>", "Len", "If",
    "EventTime", "Maximum", "Sequence", "DecayedSum", "by", "where", "after", "last", "limit", "exclusive",
    "days", "hour", "PT5H", "--", "\n", " ", "\t", "'", "#", "{", "\\",
]


def _check(sources: dict[str, str]) -> None:
    res = compile_sources(sources)
    assert not any(d.code == "E9999" for d in res.diagnostics), res.render()
    assert (res.plan is None) == bool(res.diagnostics)
    res.render()
    if res.plan is not None:
        doc = res.plan.to_json()
        Plan.from_json(doc)
        res.plan.dumps()


@FUZZ
@given(st.lists(st.sampled_from(TOKENS), max_size=60).map(" ".join))
def test_token_soup(text: str) -> None:
    _check({"a.scowl": text})


@FUZZ
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=200))
def test_random_text(text: str) -> None:
    _check({"a.scowl": "event e\n" + text})


@st.composite
def mutated(draw: st.DrawFn) -> str:
    text = draw(st.sampled_from(CORPUS))
    for _ in range(draw(st.integers(1, 4))):
        if not text:
            break
        i = draw(st.integers(0, len(text) - 1))
        j = draw(st.integers(i, min(len(text), i + 12)))
        op = draw(st.sampled_from(["delete", "insert", "replace", "duplicate"]))
        piece = draw(st.sampled_from(TOKENS))
        if op == "delete":
            text = text[:i] + text[j:]
        elif op == "insert":
            text = text[:i] + piece + text[i:]
        elif op == "replace":
            text = text[:i] + piece + text[j:]
        else:
            text = text[:j] + text[i:j] + text[j:]
    return text


@FUZZ
@given(mutated())
def test_mutated_programs(text: str) -> None:
    _check({"a.scowl": text, "b.scowl": "event weather_obs\norigin := $.o as string\n"})
