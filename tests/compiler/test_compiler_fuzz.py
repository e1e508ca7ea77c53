"""Fuzz: random and mutated Scowl never makes the compiler raise (SPEC §2.5).

For every generated topology :func:`compiler.compile_sources` must return
either a plan (which then round-trips through JSON) or diagnostics, never
both, never neither, never ``E9999 internal-error``; every diagnostic must
point into a file of the topology and render without raising.

Inputs, five hypothesis tests:

* ``test_token_soup`` -- random sequences of Scowl tokens;
* ``test_random_text`` -- random Unicode text after ``event e``;
* ``test_char_mutations`` -- real topologies (``demo_flights.scowl``,
  ``examples/flights/*.scowl``, the golden cases) with characters deleted,
  inserted, replaced or duplicated;
* ``test_token_mutations`` -- the valid topologies (the demo and the flights
  example as a three-file topology) with tokens deleted, duplicated, swapped,
  replaced, random characters inserted, and truncation;
* ``test_generated_programs`` -- programs built from the grammar by a seeded
  generator (events, inputs, scalar expressions, aggregates with random
  scopes, values and clauses, mostly in order, extreme literals), so they
  reach the checker and the planner; a failure prints the program.

How many: ``SCOWL_FUZZ_EXAMPLES`` is the number of cases of the whole file,
default 10,000 (the plain ``pytest`` run of CI), split 30/30/15/10/15 % over
the five tests in that order (cheap inputs get more, whole-topology
mutations, which cost a full compile each, fewer): hypothesis's
``max_examples`` per test. ``_check`` counts every case it compiles, and
``test_fuzz_case_count`` (last in this file) fails unless each test reached
its share and the total is at least ``SCOWL_FUZZ_EXAMPLES``. Runtime of the
default: about 27 s of CPU for the whole file on an idle 2-core development
machine (33 s before syntax errors were matched against example errors
parsed once, ``compiler.parser._example_errors``; most of the rest is lark
parsing whole topologies and hypothesis drawing cases), under a minute
wall-clock even with other test suites running beside it.
"""

from __future__ import annotations

import os
import random
import re
from collections import Counter
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st

from compiler import compile_sources
from compiler.plan import Plan

from _compiler_helpers import DEMO

#: Cases over the whole file; each test gets its share (cheap inputs more, whole topologies fewer).
TOTAL = int(os.environ.get("SCOWL_FUZZ_EXAMPLES", "10000"))
SHARES = {"token_soup": 30, "random_text": 30, "char_mutations": 15, "token_mutations": 10,
          "generated_programs": 15}
QUOTA = {name: max(1, TOTAL * pct // 100) for name, pct in SHARES.items()}
QUOTA["random_text"] += max(0, TOTAL - sum(QUOTA.values()))


def _fuzz(name: str):
    """Hypothesis settings for test ``name``: its quota of examples, deterministic, no deadline."""
    return settings(max_examples=QUOTA[name], deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


ROOT = Path(__file__).resolve().parents[2]
FLIGHTS = {p.name: p.read_text(encoding="utf-8") for p in sorted((ROOT / "examples" / "flights").glob("*.scowl"))}
CASES = [p.read_text(encoding="utf-8") for p in sorted((Path(__file__).parent / "cases").glob("*.scowl"))]
#: Valid topologies (file name -> text) to mutate.
VALID = [{"demo.scowl": DEMO}, FLIGHTS]
CORPUS = [DEMO, *FLIGHTS.values(), *CASES]

TOKENS = [
    "event", "e", "f", "x", "y", "k", "t", ":=", "$.a", "$.b[0]", '$["q"]', "as", "int", "float", "string",
    "time", "bool", "?", "0", "1", "-1", "2.5", "1e400", "99999999999999999999", "1000", "1001", "'s'", '"d"',
    "true", "false", "null", "+", "-", "*", "/", "//", "%", "<<", ">>", "&", "^", "|", "=", "!=", "~=", "<", ">",
    "<=", ">=", "in", "not", "is", "and", "or", "(", ")", "[", "]", ",", ".", "Count", "Sum", "Latest",
    "Latest<f>", "Count<e, f>", "Len", "If", "EventTime", "Maximum", "Sequence", "DecayedSum", "HyperLogLog",
    "by", "where", "after", "last", "limit", "exclusive", "days", "hour", "PT5H", "P1D", "--", "\n", " ", "\t",
    "'", "#", "{", "\\", "==", "=",
]

#: Scowl tokens (strings, comments, paths, numbers, names, operators), whitespace kept as tokens.
_TOKEN_RE = re.compile(r"""--[^\n]*|'(?:[^'\\\n]|\\.)*'|"(?:[^"\\\n]|\\.)*"|\$[^\s]*|"""
                       r"""\d+(?:\.\d+)?(?:[eE][+-]?\d+)?|[A-Za-z_][A-Za-z0-9_]*|:=|//|<<|>>|<=|>=|!=|~=|=="""
                       r"""|\n|[ \t]+|.""")

#: Cases compiled per test (read by test_fuzz_case_count).
COUNTS: Counter[str] = Counter()


def _check(sources: dict[str, str], test: str) -> None:
    """Compile, check the invariants of the result, count the case."""
    res = compile_sources(sources)
    COUNTS[test] += 1
    assert not any(d.code == "E9999" for d in res.diagnostics), res.render()
    assert (res.plan is None) == bool(res.diagnostics)
    rendered = res.render()
    for d in res.diagnostics:
        assert d.span.file in sources, (d.header(), list(sources))
        assert 1 <= d.span.line <= d.span.end_line, d.header()
        assert d.header() in rendered
    if res.plan is not None:
        doc = res.plan.to_json()
        assert Plan.from_json(doc).to_json() == _without_spans(doc)  # spans are for messages, not loaded
        res.plan.dumps()


def _without_spans(doc):
    """``doc`` without ``span`` entries (recursively)."""
    if isinstance(doc, dict):
        return {k: _without_spans(v) for k, v in doc.items() if k != "span"}
    if isinstance(doc, list):
        return [_without_spans(v) for v in doc]
    return doc


# ------------------------------------------------------------ random text
@_fuzz("token_soup")
@given(st.lists(st.sampled_from(TOKENS), max_size=60).map(" ".join))
def test_token_soup(text: str) -> None:
    _check({"a.scowl": text}, "token_soup")


@_fuzz("random_text")
@given(st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=200))
def test_random_text(text: str) -> None:
    _check({"a.scowl": "event e\n" + text}, "random_text")


# --------------------------------------------------------------- mutations
@st.composite
def char_mutated(draw: st.DrawFn) -> str:
    """A corpus text with 1-4 character-range edits."""
    text = draw(st.sampled_from(CORPUS))
    for _ in range(draw(st.integers(1, 4))):
        if not text:
            break
        i = draw(st.integers(0, len(text) - 1))
        j = draw(st.integers(i, min(len(text), i + 12)))
        op = draw(st.sampled_from(["delete", "insert", "replace", "duplicate", "chars"]))
        piece = draw(st.sampled_from(TOKENS))
        if op == "delete":
            text = text[:i] + text[j:]
        elif op == "insert":
            text = text[:i] + piece + text[i:]
        elif op == "replace":
            text = text[:i] + piece + text[j:]
        elif op == "duplicate":
            text = text[:j] + text[i:j] + text[j:]
        else:
            text = text[:i] + draw(st.text(max_size=4)) + text[i:]
    return text


@_fuzz("char_mutations")
@given(char_mutated())
def test_char_mutations(text: str) -> None:
    _check({"a.scowl": text, "b.scowl": "event weather_obs\norigin := $.o as string\n"}, "char_mutations")


@st.composite
def token_mutated(draw: st.DrawFn) -> dict[str, str]:
    """A valid topology with 1-5 token edits in one of its files (or a truncation)."""
    sources = dict(draw(st.sampled_from(VALID)))
    name = draw(st.sampled_from(sorted(sources)))
    toks = _TOKEN_RE.findall(sources[name])
    for _ in range(draw(st.integers(1, 5))):
        if not toks:
            break
        i = draw(st.integers(0, len(toks) - 1))
        op = draw(st.sampled_from(["delete", "duplicate", "swap", "replace", "insert", "chars", "copy",
                                   "truncate"]))
        if op == "delete":
            del toks[i]
        elif op == "duplicate":
            toks.insert(i, toks[i])
        elif op == "swap":
            j = draw(st.integers(0, len(toks) - 1))
            toks[i], toks[j] = toks[j], toks[i]
        elif op == "replace":
            toks[i] = draw(st.sampled_from(TOKENS))
        elif op == "insert":
            toks.insert(i, draw(st.sampled_from(TOKENS)))
        elif op == "chars":
            toks.insert(i, draw(st.text(min_size=1, max_size=3)))
        elif op == "copy":  # a token from elsewhere in the file
            toks.insert(i, toks[draw(st.integers(0, len(toks) - 1))])
        else:
            toks = toks[:i]
    sources[name] = "".join(toks)
    return sources


@_fuzz("token_mutations")
@given(token_mutated())
def test_token_mutations(sources: dict[str, str]) -> None:
    _check(sources, "token_mutations")


# ------------------------------------------------------ generated programs
_EVENTS = ["e", "f", "g"]
_NAMES = ["a", "b", "k", "t", "v", "w", "n", "m"]
_TYPES = ["int", "float", "string", "time", "bool", "integer"]
_AGGS = ["Count", "CountUnique", "Sum", "Min", "Max", "Average", "Latest", "First", "LatestTime", "FirstTime",
         "Sequence", "Set", "DecayedCount", "DecayedSum", "DecayedAverage", "HyperLogLog", "Cnt"]
_LITERALS = ["0", "1", "-1", "2", "7", "1000", "1001", "2.5", "0.5", "1e300", "1e400", "9223372036854775807",
             "99999999999999999999", "null", "'x'", "true", "'2021-04-12T22:43:46Z'", "PT5H30M", "P1D", "1 day",
             "week", "0 seconds", "1e300 weeks"]
_UNITS = ["second", "seconds", "minutes", "hour", "days", "week", ""]
_BINARY = ["+", "-", "*", "/", "//", "%", "=", "!=", "<", ">=", "and", "or", "~=", "<<", ">>", "&", "|", "^"]
_FUNCTIONS = ["Len", "If", "Coalesce", "Maximum", "Minimum", "Days", "Time", "Int", "Float", "String", "Bool",
              "Lower", "EventTime", "Contains", "FromUnixSeconds", "Nope"]
_CLAUSE_ORDER = ["by", "where", "after", "last", "limit", "exclusive"]


def _gen_expr(rng: random.Random, depth: int = 0) -> str:
    kind = rng.randint(0, 5 if depth < 3 else 1)
    if kind == 0:
        return rng.choice(_NAMES)
    if kind == 1:
        return rng.choice(_LITERALS)
    if kind == 2:
        return f"{_gen_expr(rng, depth + 1)} {rng.choice(_BINARY)} {_gen_expr(rng, depth + 1)}"
    if kind == 3:
        return f"({_gen_expr(rng, depth + 1)})"
    if kind == 4:
        args = [_gen_expr(rng, depth + 1) for _ in range(rng.randint(0, 3))]
        return f"{rng.choice(_FUNCTIONS)}({', '.join(args)})"
    prefix = rng.choice(["-", "not ", "~", ""])
    suffix = rng.choice(["", " is null", " is not null", " in (1, 2)", " not in ['a', null]", ".x", "[0]"])
    return f"{prefix}{_gen_expr(rng, depth + 1)}{suffix}"


def _gen_clause(rng: random.Random) -> str:
    kind = rng.choice(_CLAUSE_ORDER)
    if kind == "by":
        keys = [rng.choice(_NAMES) + rng.choice(["", "", " as w", " as nope"]) for _ in range(rng.randint(1, 2))]
        return "by " + ", ".join(keys)
    if kind == "where":
        return "where " + _gen_expr(rng)
    if kind == "after":
        return "after " + rng.choice([*_NAMES, "EventTime()"])
    if kind == "last":
        if rng.random() < 0.7:
            return f"last {rng.choice(_LITERALS)} {rng.choice(_UNITS)}".rstrip()
        return "last " + _gen_expr(rng)
    if kind == "limit":
        return "limit " + (rng.choice(_LITERALS) if rng.random() < 0.7 else _gen_expr(rng))
    return "exclusive"


def _gen_feature(rng: random.Random) -> str:
    name = rng.choice(_NAMES)
    kind = rng.randint(0, 2)
    if kind == 0:
        opt = rng.choice(["", "?", " ? " + rng.choice(_LITERALS)])
        return f"{name} := $.{rng.choice(_NAMES)} as {rng.choice(_TYPES)}{opt}"
    if kind == 1:
        return f"{name} := {_gen_expr(rng)}"
    scope = rng.choice(["", "", "<e>", "<f>", "<e, f>", "<g, h>"])
    values = [rng.choice(_NAMES) for _ in range(rng.randint(0, 2))]
    clauses = [_gen_clause(rng) for _ in range(rng.randint(0, 4))]
    if rng.random() < 0.7:  # mostly in the right order
        clauses.sort(key=lambda c: _CLAUSE_ORDER.index(c.split()[0]))
    return f"{name} := {rng.choice(_AGGS)}{scope}({', '.join(values)} {' '.join(clauses)})"


def generate_program(seed: int) -> dict[str, str]:
    """One or two files of ``event`` sections with random features, from ``seed`` (reproducible)."""
    rng = random.Random(seed)
    files = {}
    for fname in ["a.scowl", "b.scowl"][: rng.randint(1, 2)]:
        lines = []
        for _ in range(rng.randint(1, 3)):
            lines.append(f"event {rng.choice(_EVENTS)}")
            lines += [_gen_feature(rng) for _ in range(rng.randint(0, 7))]
        files[fname] = "\n".join(lines) + "\n"
    return files


@_fuzz("generated_programs")
@given(st.integers(0, 2**64 - 1))
def test_generated_programs(seed: int) -> None:
    """Seeded (one draw per case keeps generation cheap); a failure prints the program."""
    sources = generate_program(seed)
    note(f"sources: {sources!r}")
    _check(sources, "generated_programs")


# ------------------------------------------------------------------ count
def test_fuzz_case_count() -> None:
    """The five tests above compiled at least ``SCOWL_FUZZ_EXAMPLES`` cases together (10,000 by default)."""
    if set(COUNTS) != set(SHARES):
        pytest.skip("run the whole file to count its cases")
    for name, quota in QUOTA.items():
        assert COUNTS[name] >= quota, (name, COUNTS[name], quota)
    assert sum(COUNTS.values()) >= TOTAL
    if "SCOWL_FUZZ_EXAMPLES" not in os.environ:
        assert sum(COUNTS.values()) >= 10_000
