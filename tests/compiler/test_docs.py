"""The generated language reference (``docs/reference.md``) and the tables it is made of (SPEC §2, §2.5).

* the committed reference equals :func:`compiler.docs.render_reference` (so
  docs cannot drift from the compiler; regenerate with ``python -m compiler.docs``);
* every diagnostic example in :data:`compiler.diagnostics.CODES` reports
  exactly its own code -- from source text, or from files on disk for the
  codes that need them (E0110, E0111); E9999 has no example;
* every code that source text can trigger has a golden case;
* the operator ladder in :data:`compiler.functions.PRECEDENCE` is the one the
  parser implements; the documentation tables cover every built-in and
  aggregate, and the documented empty-window values are the merge algebra's.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from pathlib import Path

import pytest

from compiler import compile_sources, nodes
from compiler.diagnostics import CODES
from compiler.docs import REFERENCE_PATH, example_output, file_example, main, render_reference
from compiler.functions import AGGREGATE_DOCS, AGGREGATES, PRECEDENCE, SCALAR_DOCS, SCALAR_FUNCTIONS
from compiler.parser import parse_file

ROOT = Path(__file__).resolve().parents[2]
CASES = Path(__file__).parent / "cases"
#: Codes no source text can trigger: the files on disk (tested here) and a compiler bug (test_compiler_api.py).
FILE_CODES = {"E0110", "E0111"}
NO_SOURCE = FILE_CODES | {"E9999"}


# ------------------------------------------------------------ the reference
def test_reference_is_up_to_date() -> None:
    committed = REFERENCE_PATH.read_text(encoding="utf-8") if REFERENCE_PATH.exists() else ""
    generated = render_reference()
    assert committed == generated, (
        "docs/reference.md is out of date with the compiler; run `python -m compiler.docs` and commit it")


def test_reference_is_deterministic() -> None:
    assert render_reference() == render_reference()


def test_check_flag(tmp_path: Path) -> None:
    out = tmp_path / "reference.md"
    assert main(["--output", str(out)]) == 0
    assert main(["--check", "--output", str(out)]) == 0
    out.write_text(out.read_text(encoding="utf-8").replace("Scowl", "Scowll", 1), encoding="utf-8")
    assert main(["--check", "--output", str(out)]) == 1


def test_module_entry_point_checks_the_committed_file() -> None:
    r = subprocess.run([sys.executable, "-m", "compiler.docs", "--check"], cwd=ROOT, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]


def test_reference_documents_everything() -> None:
    text = REFERENCE_PATH.read_text(encoding="utf-8")
    for c in CODES:
        assert f"### {c.code} {c.name}" in text
    for name in SCALAR_FUNCTIONS:
        assert f"| `{name}` |" in text
    for name in AGGREGATES:
        assert f"| `{name}` |" in text


# --------------------------------------------------------------- examples
@pytest.mark.parametrize("code", [c for c in CODES if c.code not in NO_SOURCE], ids=lambda c: c.code)
def test_example_reports_exactly_its_code(code) -> None:
    src = code.source()
    assert src is not None and code.example in src
    result = compile_sources({"example.scowl": src})
    assert result.plan is None
    assert {d.code for d in result.diagnostics} == {code.code}, result.render()
    assert all(d.name == code.name for d in result.diagnostics)
    assert example_output(code) == result.render()


@pytest.mark.parametrize("code", sorted(FILE_CODES))
def test_file_example_reports_exactly_its_code(code: str) -> None:
    what, result = file_example(code)
    assert what
    assert [d.code for d in result.diagnostics] == [code], result.render()
    rendered = result.render()
    assert f"error {code} " in rendered and "/tmp" not in rendered and "\\" not in rendered


def test_codes_without_source_are_exactly_the_file_and_internal_ones() -> None:
    assert {c.code for c in CODES if c.source() is None} == NO_SOURCE
    assert file_example("E0301") is None


def test_every_source_code_has_a_golden_case() -> None:
    """A golden pair ``cases/<CODE>_<name>.scowl`` + ``.expected`` for every code source text can trigger."""
    missing = []
    for c in CODES:
        if c.source() is None:
            continue
        stem = f"{c.code}_{c.name.replace('-', '_')}"
        if not (CASES / f"{stem}.scowl").exists() or not (CASES / f"{stem}.expected").exists():
            missing.append(stem)
    assert not missing, f"add golden cases (SCOWL_UPDATE_GOLDEN=1 writes the .expected): {missing}"


# -------------------------------------------------------------- precedence
def _parse_expr(text: str):
    f, diags = parse_file("p.scowl", f"event e\nx := {text}\n")
    assert not diags, (text, diags)
    (decl,) = [s for s in f.statements if isinstance(s, nodes.FeatureDecl)]
    return decl.rhs


def _shape(node) -> str:
    """Fully parenthesised form with operator names."""
    if isinstance(node, nodes.Binary):
        return f"({_shape(node.left)} {node.op} {_shape(node.right)})"
    if isinstance(node, nodes.Unary):
        return f"({node.op} {_shape(node.operand)})"
    if isinstance(node, nodes.IsNull):
        return f"({_shape(node.operand)} {'is_not_null' if node.negated else 'is_null'})"
    if isinstance(node, nodes.Access):
        return f"({_shape(node.obj)}.{node.field})" if node.field is not None else f"({_shape(node.obj)}[])"
    if isinstance(node, nodes.Name):
        return node.name
    raise AssertionError(f"unexpected node {node!r}")


def _binary_levels():
    return [(i, lvl) for i, lvl in enumerate(PRECEDENCE) if lvl.grouping in ("left", "none")]


def _rep(lvl) -> tuple[str, str]:
    """A representative (symbol, op) of a binary level (not `in` / `is null`, which take special operands)."""
    return lvl.symbols[0], lvl.ops[0]


@pytest.mark.parametrize("tight,loose", [(a, b) for a, b in itertools.combinations(_binary_levels(), 2)],
                         ids=lambda x: x[1].symbols[0])
def test_binary_levels_bind_in_table_order(tight, loose) -> None:
    (ts, to), (ls, lo) = _rep(tight[1]), _rep(loose[1])
    assert _shape(_parse_expr(f"a {ls} b {ts} c")) == f"(a {lo} (b {to} c))"
    assert _shape(_parse_expr(f"a {ts} b {ls} c")) == f"((a {to} b) {lo} c)"


@pytest.mark.parametrize("level", [lvl for _, lvl in _binary_levels() if lvl.grouping == "left"],
                         ids=lambda lvl: lvl.symbols[0])
def test_left_levels_group_left(level) -> None:
    for (s1, o1), (s2, o2) in itertools.product(zip(level.symbols, level.ops), repeat=2):
        assert _shape(_parse_expr(f"a {s1} b {s2} c")) == f"((a {o1} b) {o2} c)"


def test_comparisons_do_not_chain() -> None:
    (level,) = [lvl for lvl in PRECEDENCE if lvl.grouping == "none"]
    for s1, s2 in (("=", "<"), ("<", "<"), ("!=", ">=")):
        assert s1 in level.symbols and s2 in level.symbols
        _, diags = parse_file("p.scowl", f"event e\nx := a {s1} b {s2} c\n")
        assert [d.code for d in diags] == ["E0101"]
    assert _shape(_parse_expr("a + b is not null")) == "((a add b) is_not_null)"
    assert _shape(_parse_expr("not a is null")) == "(not (a is_null))"


def test_prefix_and_postfix_levels() -> None:
    index = {op: i for i, lvl in enumerate(PRECEDENCE) for op in lvl.ops if op}
    for i, lvl in enumerate(PRECEDENCE):
        if lvl.grouping != "prefix":
            continue
        for sym, op in zip(lvl.symbols, lvl.ops):
            prefix = sym.replace("x", "").strip()
            sep = " " if prefix.isalpha() else ""
            for j, other in _binary_levels():
                bs, bo = _rep(other)
                got = _shape(_parse_expr(f"{prefix}{sep}a {bs} b"))
                assert got == (f"(({op} a) {bo} b)" if i < j else f"({op} (a {bo} b))"), (sym, bs, got)
            assert _shape(_parse_expr(f"{prefix}{sep}a.f")) == f"({op} (a.f))"
            assert _shape(_parse_expr(f"{prefix}{sep}a[0]")) == f"({op} (a[]))"
    assert PRECEDENCE[0].grouping == "postfix" and index["neg"] == 1
    assert _shape(_parse_expr("a.f.g")) == "((a.f).g)"


def test_precedence_names_every_operator_once() -> None:
    from compiler.plan import OPERATORS

    ops = [op for lvl in PRECEDENCE for op in lvl.ops if op]
    assert len(ops) == len(set(ops))
    assert set(ops) <= set(OPERATORS)
    assert set(OPERATORS) - set(ops) <= {"field", "index"}  # the postfix forms, documented as `x.name`, `x[i]`
    for lvl in PRECEDENCE:
        assert len(lvl.symbols) == len(lvl.ops)


# -------------------------------------------------------------- doc tables
def test_scalar_docs_cover_every_builtin() -> None:
    assert set(SCALAR_DOCS) == set(SCALAR_FUNCTIONS)
    for name, fn in SCALAR_FUNCTIONS.items():
        params = SCALAR_DOCS[name].params
        assert len(params) == len(fn.params), name
        assert len(params) == (fn.max_args if fn.max_args is not None else fn.min_args), name
        assert fn.doc, name


def test_aggregate_docs_cover_every_aggregate() -> None:
    assert set(AGGREGATE_DOCS) == set(AGGREGATES)


@pytest.mark.parametrize("name", sorted(AGGREGATES))
def test_documented_empty_window_is_the_algebras(name: str) -> None:
    from compiler.algebra.ops import fold, make_op

    fn = AGGREGATES[name]
    samples = [[]] if fn.max_values == 0 else [[t] for t in ("int", "float") if t in fn.value_types] or [["string"]]
    doc = AGGREGATE_DOCS[name].empty
    for types in samples:
        op = make_op(name, types, ["v"][: len(types)], window_s=3600)
        value = op.value_at(op.init(), 0) if name.startswith("Decayed") else fold(op, [])
        assert json.dumps(value) in doc.replace("(int)", "").replace("(float)", "").split(), (name, types, value)
