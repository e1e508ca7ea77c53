"""The Scowl language reference, generated from the compiler's own tables (SPEC §2, §2.5).

:func:`render_reference` builds ``docs/reference.md`` from what the compiler
itself uses, so the reference cannot say one thing while the compiler does
another:

* names, reserved words and duration units from :mod:`compiler.check` and
  :mod:`compiler.parser`;
* the input forms, literal values and evaluation examples by compiling
  small topologies with :func:`compiler.compile_sources` and running the
  scalar expressions through the Python evaluator
  (:func:`compiler.codegen.python.compile_expr`);
* the coercion table by calling :func:`compiler.typesystem.coerce`;
* operators from :data:`compiler.functions.PRECEDENCE` and
  :func:`~compiler.functions.binary_result` /
  :func:`~compiler.functions.unary_result`;
* built-ins from :data:`~compiler.functions.SCALAR_FUNCTIONS`, aggregates
  from :data:`~compiler.functions.AGGREGATES` (with their ``*_DOCS`` tables);
* every diagnostic of :data:`compiler.diagnostics.CODES`, with the output of
  really compiling its example.

The output is deterministic (no timestamps, no temporary paths), and
``tests/compiler/test_docs.py`` fails when the committed file differs.

Command line::

    python -m compiler.docs            # rewrite docs/reference.md
    python -m compiler.docs --check    # exit 1 with a diff if it is stale

Source: SPEC §2 (language), §2.5 (diagnostics).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any, Callable, Iterable

from compiler import CompileResult, compile_dir, compile_sources
from compiler.check import DEFAULT_WINDOW_S, MAX_LIMIT, MAX_WINDOW_S, NAME_RE
from compiler.diagnostics import CODES, Code
from compiler.functions import (
    AGGREGATE_DOCS, AGGREGATES, ALIASES, INPUT_TYPES, KEY_TYPES, PRECEDENCE, SCALAR_FUNCTIONS, binary_result,
    result_text, signature, unary_result,
)
from compiler.parser import KEYWORDS, UNIT_SECONDS
from compiler.typesystem import coerce, to_json_value

__all__ = ["render_reference", "REFERENCE_PATH", "example_output", "file_example", "main"]

#: Where the generated reference lives in the repository.
REFERENCE_PATH = Path(__file__).resolve().parents[1] / "docs" / "reference.md"

#: File name used for every compiled example (it appears in spans).
EXAMPLE_FILE = "example.scowl"

_SCALARS = ("bool", "int", "float", "string", "time", "duration")

#: A small valid topology shown in section 1 (compiled when the docs are built).
_INTRO_EXAMPLE = """\
-- payments.scowl
event payment
user := $.user.id as string
amount := $.amount as float ? 0.0
big := amount > 100
spend_7d := Sum(amount by user last 7 days)
big_count := Count(by user where big)
last_big := LatestTime(by user where big exclusive)
since_last_big := EventTime() - last_big

event login
user := $.user as string
payments_1h := Count<payment>(by user last 1 hour)
"""


# ------------------------------------------------------------------ helpers
def _md_cell(text: str) -> str:
    """Escape text for a Markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _code(text: str) -> str:
    """Inline code that survives backticks and pipes inside a table cell."""
    text = text.replace("|", "\\|")
    if "`" in text:
        return f"`` {text} ``"
    return f"`{text}`"


def _table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> str:
    """A Markdown table (cells are taken as Markdown)."""
    head = list(header)
    out = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    out += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(out) + "\n"


def _block(text: str, lang: str = "") -> str:
    """A fenced code block (the fence grows if the text holds backticks)."""
    fence = "```"
    while fence in text:
        fence += "`"
    return f"{fence}{lang}\n{text.rstrip(chr(10))}\n{fence}\n"


def _json(value: Any) -> str:
    """JSON text of a decoded value, as shown in the docs."""
    return json.dumps(value, ensure_ascii=False)


def _compile_ok(text: str) -> CompileResult:
    """Compile a docs example that must be valid.

    Raises:
        RuntimeError: the example does not compile (the docs would lie).
    """
    result = compile_sources({EXAMPLE_FILE: text})
    if result.plan is None:
        raise RuntimeError(f"docs example does not compile:\n{text}\n{result.render()}")
    return result


def _feature(text: str, event: str, name: str) -> Any:
    """The plan feature ``name`` of ``event`` after compiling ``text``."""
    plan = _compile_ok(text).plan
    return next(f for f in plan.events[event].features if f.name == name)


def _shown(value: Any, type_name: str) -> str:
    """A run-time value as its JSON encoding (SPEC §3.5), with the unit of a duration."""
    j = _json(to_json_value(value, type_name))
    if type_name == "duration" and value is not None:
        return f"{j} (seconds)"
    return j


def _evaluate(expr_text: str, env: dict[str, Any] | None = None, setup: str = "") -> tuple[str, str, str | None]:
    """Compile ``x := expr_text`` and evaluate it with the Python evaluator.

    Args:
        expr_text: a Scowl expression.
        env: feature values (run-time representation) for ``setup``'s features.
        setup: feature lines the expression needs.

    Returns:
        ``(type, shown value, error message or None)``.
    """
    from compiler.codegen.python import compile_expr
    from compiler.runtime import EvalError

    f = _feature(f"event e\n{setup}x := {expr_text}\n", "e", "x")
    fn = compile_expr(f.expr)
    try:
        return f.type, _shown(fn(env or {}, 0), f.type), None
    except EvalError as e:
        return f.type, "null", e.message


# ----------------------------------------------------------------- sections
def _section_files() -> str:
    """Section 1: files, sections, names, reserved words, an example topology and its plan."""
    plan_rows = []
    plan = _compile_ok(_INTRO_EXAMPLE).plan
    for ev_name in sorted(plan.events):
        for f in plan.events[ev_name].features:
            fn = f.aggregate.function if f.aggregate is not None else ""
            plan_rows.append([ev_name, f"`{f.name}`", f.kind, f"`{f.type}`", fn])
    words = ", ".join(f"`{w}`" for w in sorted(KEYWORDS))
    return f"""## 1. Files, sections and features

A *topology* is every `*.scowl` file under a directory, read in sorted path
order (`scowl check DIR`). `event NAME` opens a section; a section may be
reopened in any file, and every file starts outside any section. Comments run
from `--` to the end of the line.

A feature is `name := expression`. Names match `{NAME_RE.pattern.rstrip(chr(92) + 'Z')}` and are
unique within an event. Features may be declared in any order: the compiler
orders them by dependency and rejects cycles (E0306). A feature is an
*input* (read from the event's JSON payload), a *scalar* (an expression over
other features of the same event) or an *aggregate* (a windowed function of
earlier events, section 7).

Reserved words (not usable as names): {words}.

Example (it compiles; the table is the plan the compiler makes of it):

{_block(_INTRO_EXAMPLE, "scowl")}
{_table(["Event", "Feature", "Kind", "Type", "Aggregate"], plan_rows)}"""


def _section_inputs() -> str:
    """Section 2: input forms (compiled) and the coercion table (``typesystem.coerce``)."""
    forms = [
        ("$.amount as float", "required: a missing or null value gives null **and an error** for the feature"),
        ("$.amount as float?", "optional: a missing or null value gives null, no error"),
        ("$.amount as float ? 0.0", "default: a missing or null value gives the literal, no error"),
        ("$.user.id as string", "nested field"),
        ("$.items[0] as int", "array item (0-based)"),
        ('$["odd key"] as string', "a key that is not a name"),
        ("$.at as time ? '2021-01-01T00:00:00Z'", "a time default is an ISO-8601 string or epoch milliseconds"),
    ]
    rows = []
    for text, meaning in forms:
        f = _feature(f"event e\nx := {text}\n", "e", "x")
        spec = f.input
        path = "".join(f".{p}" if isinstance(p, str) and NAME_RE.match(p) else f"[{_json(p)}]" for p in spec.path)
        default = _shown(spec.default, f.type) if spec.has_default else ""
        rows.append([_code(f"x := {text}"), f"`{f.type}`", f"`${path}`", "yes" if spec.optional else "no",
                     _md_cell(default), meaning])
    raws: list[Any] = [5, 5.0, 5.6, -5.6, "5", "5.6", "1e3", "bar", "null", None, True, "TRUE", "",
                       "2021-04-12T22:43:46Z", "2021-04-12", 1618267426000, [1], {"a": 1}]
    crows = []
    for raw in raws:
        cells = [f"`{_json(raw)}`"]
        for t in INPUT_TYPES:
            value, err = coerce(raw, t)
            cell = _json(to_json_value(value, t))
            cells.append(f"`{_md_cell(cell)}`" + (f" — error: {_md_cell(err)}" if err else ""))
        crows.append(cells)
    return f"""## 2. Inputs

`name := $.path as T` reads a JSON path of the event payload and converts it
to `T`, one of {", ".join(f"`{t}`" for t in INPUT_TYPES)}. `as T?` makes the input optional,
`as T ? literal` gives a default.

{_table(["Definition", "Type", "Path", "Optional", "Default", "Meaning"], rows)}
### Coercion

How each raw JSON value is read as each input type (the coercion table of Sumatra; computed by
`compiler.typesystem.coerce`, the function the serving evaluator uses, with
Spark held to the same results). An error makes the feature null and is
reported for that feature; `5.6` as `int` is the exception: it gives `5`
*and* an error (loss of precision). Times are shown as they are returned
(ISO-8601, UTC, milliseconds).

{_table(["JSON value", *[f"as `{t}`" for t in INPUT_TYPES]], crows)}"""


def _section_literals() -> str:
    """Section 3: literals (compiled and evaluated) and duration units."""
    examples = ["42", "-7", "2.5", "1e3", "'single'", '"double"', "'tab\\there'", "'caf\\u00e9'", "true", "false",
                "null", "10 minutes", "2.5 hours", "1 day", "week", "PT5H30M", "P1DT12H", "PT0.5S"]
    rows = []
    for lit in examples:
        t, shown, _ = _evaluate(lit)
        rows.append([_code(lit), f"`{t}`", _code(shown)])
    units = [[f"`{u}`, `{u}s`", str(s)] for u, s in UNIT_SECONDS.items()]
    return f"""## 3. Literals

Strings take `'…'` or `"…"` with the escapes `\\\\ \\' \\" \\n \\t \\r \\0 \\uXXXX`.
A duration is a number and a unit (`10 minutes`, `2.5 hours`), a bare unit
(`week` is one week) or ISO-8601 (`PT5H30M`, `P1DT12H`). Integers are
64-bit; a larger literal is an error (E0108).

{_table(["Literal", "Type", "Value"], rows)}
{_table(["Unit", "Seconds"], units)}"""


def _op_rows(op: str, symbol: str) -> list[str]:
    """``a op b -> r`` for every pair of non-null scalar types the operator accepts."""
    by_result: dict[str, list[str]] = {}
    for a in _SCALARS:
        for b in _SCALARS:
            r = binary_result(op, a, b)
            if r is not None:
                by_result.setdefault(r, []).append(f"{a} {symbol} {b}")
    return [f"{', '.join(f'`{p}`' for p in pairs)} → `{r}`" for r, pairs in by_result.items()]


def _section_operators() -> str:
    """Section 4: the precedence ladder, operand typing and evaluated examples."""
    rows = []
    for level, ops in enumerate(PRECEDENCE, 1):
        rows.append([str(level), " ".join(_code(s) for s in ops.symbols), ops.grouping, _md_cell(ops.meaning)])
    typing_rows = []
    for ops in PRECEDENCE:
        for symbol, op in zip(ops.symbols, ops.ops):
            if not op or op in ("in", "not_in", "is_null", "is_not_null"):
                continue
            if op in ("neg", "bitnot", "not"):
                accepted = [t for t in _SCALARS if unary_result(op, t) is not None]
                cell = ", ".join(f"`{symbol[0] if op != 'not' else 'not '}{t}` → `{unary_result(op, t)}`"
                                 for t in accepted)
            else:
                cell = "; ".join(_op_rows(op, symbol))
            typing_rows.append([_code(symbol), _md_cell(cell)])
    examples = [
        ("7 / 2", ""), ("7 // 2", ""), ("-7 // 2", ""), ("-7 % 3", ""), ("7.5 // 2", ""), ("2 + 3.5", ""),
        ("'a' + 'b'", ""), ("1 << 3", ""), ("6 & 3", ""), ("6 ^ 3", ""), ("6 | 3", ""), ("~0", ""),
        ("1 = 1.0", ""), ("'b' > 'a'", ""), ("'abc' ~= '^a'", ""), ("3 in (1, 2, 3)", ""), ("3 not in [1, 2]", ""),
        ("t + 90 minutes", "t := $.t as time\n"), ("t - 1 day", "t := $.t as time\n"),
        ("t - Time('2021-04-12T00:00:00Z')", "t := $.t as time\n"),
        ("2 hours * 1.5", ""), ("Days(36 hours)", ""), ("1 day / 2 hours", ""),
    ]
    env = {"t": 1618267426000}
    erows = []
    for text, setup in examples:
        t, shown, err = _evaluate(text, env, setup)
        erows.append([_code(text), f"`{t}`", _code(shown) + (f" — error: {_md_cell(err)}" if err else "")])
    return f"""## 4. Operators

Tightest first. Equality is a single `=`; `a == b` is E0105. Comparisons do
not chain (`a < b < c` is a syntax error); write `a < b and b < c`.

{_table(["Level", "Operators", "Grouping", "Meaning"], rows)}
### Operand types

Every accepted combination of non-null operand types and its result type
(from `compiler.functions.binary_result` / `unary_result`; anything else is
E0401 type-mismatch). `null` fits any operand. `=` and `!=` accept any two
values of one type, `in`/`not in` a literal list `(a, b)` or `[a, b]` whose
items have the type of the left side (E0404 otherwise), `is null`/`is not
null` any value. `~=` searches its left side for the regular expression on
its right, which must be a string literal (E0406).

{_table(["Operator", "Operand types → result"], typing_rows)}
### Examples

Evaluated by the compiler's Python evaluator (the serving engine; Spark gives
the same results), with `t` = `2021-04-12T22:43:46.000Z`:

{_table(["Expression", "Type", "Value"], erows)}"""


def _section_nulls() -> str:
    """Section 5: null propagation and evaluation errors, evaluated."""
    examples = ["null + 1", "null = null", "null < 1", "Len(null)", "null and false", "null and true",
                "null or true", "null or false", "not null", "null is null", "1 is not null", "Coalesce(null, 2)",
                "If(null, 'yes', 'no')", "1 in (1, null)", "2 in (1, null)", "Int(null)", "1 / 0", "5 % 0",
                "Int('x')", "Time('not a time')", "9223372036854775807 + 1"]
    rows = []
    for text in examples:
        t, shown, err = _evaluate(text)
        rows.append([_code(text), f"`{t}`", _code(shown), _md_cell(err or "")])
    return f"""## 5. Nulls and evaluation errors

Null propagates through operators and functions (`null + 1` is null;
comparisons with null are null), except `and`/`or`/`not`, which follow SQL's
three-valued logic, `is null`/`is not null`, `Coalesce` and `If` (a null
condition takes the `else` branch), and `in` (a null among the items makes a
miss null, as in SQL). A `where` clause treats null as false.

An evaluation error (division or modulo by zero, 64-bit overflow, a string
that does not convert) makes the feature null and records an error for that
feature in the response; the event is still processed. `and`, `or`, `If`
and `Coalesce` evaluate only what they need, so `If(x = 0, 0, 1 / x)` has no
error when `x` is 0.

{_table(["Expression", "Type", "Value", "Error"], rows)}"""


def _section_functions() -> str:
    """Section 6: every built-in with its signature, result and description."""
    rows = []
    for name in sorted(SCALAR_FUNCTIONS):
        fn = SCALAR_FUNCTIONS[name]
        aliases = sorted(a for a, c in ALIASES.items() if c == name)
        sig = _code(signature(name)) + "".join(f"<br>alias {_code(a)}" for a in aliases)
        rows.append([f"`{name}`", sig, _md_cell(result_text(name)), _md_cell(fn.doc)])
    return f"""## 6. Built-in functions

Every built-in accepts `null` for any argument; the result is then null,
except for `Coalesce` and `If`. `Time(null)`, `Int(null)`, `Float(null)`,
`String(null)` and `Bool(null)` are typed nulls. A call with the wrong number
of arguments is E0402, with an argument of the wrong type E0401; an unknown
name is E0303 (with the nearest name as a hint).

{_table(["Function", "Signature", "Result", "Description"], rows)}"""


def _values_text(lo: int, hi: int | None) -> str:
    """``none``, ``exactly 1``, ``0 or more`` ..."""
    if hi is None:
        return f"{lo} or more"
    if hi == 0:
        return "none"
    return f"exactly {lo}" if lo == hi else f"{lo} to {hi}"


def _agg_example(name: str) -> str:
    """``Latest(i, s)`` → ``struct{i:int,s:string}``: the result type for sample values."""
    fn = AGGREGATES[name]
    if fn.max_values == 0:
        names, types = [], []
    else:
        first = "i" if "int" in fn.value_types else "s"
        names, types = [first], ["int" if first == "i" else "string"]
        if fn.max_values is None and fn.needs_value_types:
            names, types = ["i", "s"], ["int", "string"]
    call = f"{name}({', '.join(names)})"
    return f"`{call}` → `{fn.result(names, types)}`"


def _section_aggregates() -> str:
    """Section 7: the aggregate form, its clauses and every aggregate function."""
    clause_rows = [
        ["`by k [as w], …`", "keys: `k` is a feature of the reading event, `w` (default: `k`) of each writer event "
         "(E0213 if missing, E0215 if the types differ). Key types: "
         + ", ".join(f"`{t}`" for t in sorted(KEY_TYPES)) + ". No `by`: one global key. A null key writes nothing "
         "and reads null.", "all"],
        ["`where cond`", "a bool expression over writer features, applied at write time; null counts as false "
         "(E0217 if not bool)", "all"],
        ["`after t`", "`t` names a `time` feature of the reading event (not an expression, E0203); only writes "
         "after it count", "not Decayed\\*, HyperLogLog (E0204)"],
        ["`last d`", f"a constant duration, whole seconds, at least 1 second and at most {MAX_WINDOW_S} seconds "
         f"(10,000 years) (E0205, E0206). Default: {DEFAULT_WINDOW_S // 86400} days. For Decayed\\* it is the "
         "decay constant W", "all"],
        ["`limit n`", f"an integer constant 1…{MAX_LIMIT} (E0207, E0208): only the latest n counted writes in the "
         "window count", "not Decayed\\*, HyperLogLog (E0222)"],
        ["`exclusive`", "the reading event's own write is left out", "common aggregates only (E0209)"],
    ]
    rows = []
    for name, fn in AGGREGATES.items():
        doc = AGGREGATE_DOCS[name]
        types = ", ".join(f"`{t}`" for t in sorted(fn.value_types)) if fn.max_values != 0 else "—"
        clauses = ["by", "where"] + ([] if fn.approximate else ["after"]) + ["last"]
        if not fn.approximate:
            clauses.append(f"limit (default {fn.default_limit})" if fn.default_limit else "limit")
        clauses.append("exclusive")
        rows.append([f"`{name}`", _values_text(fn.min_values, fn.max_values), types, ", ".join(clauses),
                     _md_cell(doc.result) + "<br>" + _agg_example(name), f"`{doc.empty}`", _md_cell(doc.summary)])
    return f"""## 7. Aggregates

    Function[<scope, …>]([value, …] [by key [as write_key], …] [where cond]
                         [after time_feature] [last duration] [limit n] [exclusive])

Clauses are optional and go in this order (E0201 otherwise; twice is E0202).
An aggregate may stand anywhere in a scalar expression (see *Aggregates
inside expressions* below), but not in a clause of another aggregate or as
its value (E0223); scalar functions take no scope or clauses (E0219).

* **Scope.** No `<…>`: the writers are the events of the current type (a
  *common* aggregate). `<e1, e2>`: events of those types write it (E0302 for
  an unknown event); a scope of only the current event is common too.
* **Values** are feature names of the writer events (E0211 for an
  expression), defined in every scope event (E0212) with one type (E0220).
  A write counts only if all its values are non-null. Several values make a
  struct (Latest, First, Sequence) or a tuple (CountUnique, Set, HyperLogLog).

{_table(["Clause", "Meaning", "Allowed on"], clause_rows)}
### Functions

{_table(["Function", "Values", "Value types", "Clauses", "Result", "Empty window", "Computes"], rows)}
`Latest`/`LatestTime` take the latest counted write (by time, then
arrival), `First`/`FirstTime` the earliest. Decayed aggregates weigh a write
at time `s`, read at `t`, by `exp(-(t - s) / W)` over all history (O(1)
state, no hard window).

{_section_inline()}"""


_INLINE_EXAMPLE = """event payment
a := $.a as string
b := $.b as string
amount := $.amount as float
month_money := Sum(amount by a, b last 30 days)
past_money := Sum(amount by a, b last 30 days) - Sum(amount by a, b last 48 hours)
avg_decayed := DecayedSum(amount by a) / DecayedCount(by a)
is_new := Count(by a exclusive) = 0

event login
acct := $.acct as string
days_since := Days(EventTime() - LatestTime<update_device>(by acct))

event update_device
acct := $.acct as string
"""


def _section_inline() -> str:
    """The *Aggregates inside expressions* subsection, from the compiled example (SPEC §2.4)."""
    res = _compile_ok(_INLINE_EXAMPLE)
    rows = []
    for ev_name in sorted(res.plan.events):
        ep = res.plan.events[ev_name]
        for f in ep.features:
            if f.kind != "aggregate":
                continue
            a = f.aggregate
            where = f"inside `{f.inline_of}`: `{f.text}`" if f.inline_of else f"named feature `{f.name}`"
            rows.append([f"`{ev_name}`", where, f"`{f.type}`", f"`{a.definition_hash}`"])
    return f"""### Aggregates inside expressions

An aggregate may stand anywhere a scalar expression may, as in Sumatra's own
examples. Each one is an unnamed aggregate feature of the event: same state,
window and resolution as if written as a named feature, computed on every
engine (serving, backfill, replay, stream, status) and listed by `scowl plan`
under the feature that contains it, which stays a `scalar`. Identical
aggregates share one state (same definition hash), whether inline or named.
They are not returned by the API or replay: only named features are.

{_block(_INLINE_EXAMPLE.strip(), "scowl")}
{_table(["Event", "Aggregate", "Type", "State (definition hash)"], rows)}
An aggregate cannot stand in `where`, a `by` key, `after`, `last`, `limit`
or as another aggregate's value (E0223): define it as a feature and name it
there (an aggregate over an aggregate's feature is fine).
"""


def file_example(code: str) -> tuple[str, CompileResult] | None:
    """Trigger a code that needs the file system, in a temporary directory.

    Args:
        code: ``E0110`` (a file that is not UTF-8) or ``E0111`` (no
            ``.scowl`` file).

    Returns:
        ``(description of the files, result)`` with the temporary path
        replaced by ``features`` in the result's spans and messages (so the
        output is deterministic); ``None`` for any other code.
    """
    if code not in ("E0110", "E0111"):
        return None
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "features"
        root.mkdir()
        if code == "E0110":
            (root / EXAMPLE_FILE).write_bytes(b"event e\nname := 'caf\xe9'  -- saved as Latin-1\n")
            what = f"`features/{EXAMPLE_FILE}` holds `event e` and `name := 'café'` saved as Latin-1 (byte 0xe9)"
        else:
            (root / "README.md").write_text("no features here\n")
            what = "`features/` holds only a `README.md`"
        result = compile_dir(root)
    prefix = str(Path(tmp)) + os.sep
    diags = []
    for d in result.diagnostics:
        span = type(d.span)(d.span.file.replace(prefix, ""), d.span.line, d.span.col, d.span.end_line,
                            d.span.end_col)
        diags.append(type(d)(d.code, d.name, span, d.message.replace(prefix, ""), d.hint, d.severity))
    return what, CompileResult(None, diags, result.sources)


def example_output(c: Code) -> str | None:
    """Return the rendered diagnostics of compiling ``c``'s example file, or ``None`` if it has none."""
    src = c.source()
    if src is None:
        fe = file_example(c.code)
        return fe[1].render() if fe else None
    return compile_sources({EXAMPLE_FILE: src}).render()


def _section_diagnostics() -> str:
    """Section 8: every diagnostic code with its example and real output."""
    summary = _table(["Code", "Name", "Meaning"],
                     ([f"[{c.code}](#{c.code.lower()}-{c.name})", f"`{c.name}`", _md_cell(c.description)]
                      for c in CODES))
    parts = [f"""## 8. Diagnostics

`scowl check DIR` compiles a topology and prints every error (not only the
first), then a count, and exits 1 if there is any. Each error names the file
and the span `line:col-line:col` (end column exclusive), a stable code and
name, a one-line message, the source line with the span underlined, and a
hint where one helps:

    FILE:LINE:COL-LINE:COL: error CODE name: message
     LINE | source line
          |      ^^^^^
      hint: how to fix it

A malformed file never produces a Python traceback. Codes are stable and
never renumbered. Each example below is compiled when this file is
generated; the output shown is the compiler's.

{summary}"""]
    for c in CODES:
        parts.append(f"### {c.code} {c.name}\n\n{c.description}\n")
        src = c.source()
        if src is not None:
            parts.append(_block(src, "scowl"))
            parts.append(_block(example_output(c) or "", "text"))
            continue
        fe = file_example(c.code)
        if fe is not None:
            what, result = fe
            parts.append(f"Needs files, not source text: {what}. `scowl check features` prints:\n")
            parts.append(_block(result.render(), "text"))
            continue
        parts.append("No example: this is reported, instead of a Python traceback, when the compiler itself "
                     "fails. The message names the exception and where it happened; please report it with "
                     "the source that triggers it.\n")
    return "\n".join(parts)


_SECTIONS: tuple[Callable[[], str], ...] = (
    _section_files, _section_inputs, _section_literals, _section_operators, _section_nulls, _section_functions,
    _section_aggregates, _section_diagnostics,
)


def render_reference() -> str:
    """Generate the Markdown language reference (the text of ``docs/reference.md``).

    Returns:
        Markdown text ending in one newline; the same on every run.

    Raises:
        RuntimeError: an example that should compile does not (a bug in the
            docs or the compiler).

    Source: SPEC §2, §2.5.
    """
    head = """# Scowl language reference

<!-- Generated by `python -m compiler.docs` from the compiler's own tables. Do not edit by hand. -->

Scowl v1 as the compiler implements it: every table and example below is
produced from the compiler's tables or by running the compiler, and
`tests/compiler/test_docs.py` fails if this file falls out of date
(regenerate it with `python -m compiler.docs`).

1. [Files, sections and features](#1-files-sections-and-features)
2. [Inputs](#2-inputs)
3. [Literals](#3-literals)
4. [Operators](#4-operators)
5. [Nulls and evaluation errors](#5-nulls-and-evaluation-errors)
6. [Built-in functions](#6-built-in-functions)
7. [Aggregates](#7-aggregates)
8. [Diagnostics](#8-diagnostics)
"""
    body = "\n".join(s() for s in _SECTIONS)
    text = head + "\n" + body
    return "\n".join(line.rstrip() for line in text.split("\n")).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    """``python -m compiler.docs [--check] [--output PATH]``.

    Args:
        argv: arguments (default ``sys.argv[1:]``).

    Returns:
        0 when written or up to date; 1 when ``--check`` finds the file
        missing or different (a unified diff goes to stderr).
    """
    ap = argparse.ArgumentParser(prog="python -m compiler.docs", description=__doc__.split("\n", 1)[0])
    ap.add_argument("--check", action="store_true", help="do not write; exit 1 if the file is out of date")
    ap.add_argument("--output", type=Path, default=REFERENCE_PATH, help="the reference file (default: %(default)s)")
    args = ap.parse_args(argv)
    text = render_reference()
    path: Path = args.output
    if args.check:
        current = path.read_text(encoding="utf-8") if path.exists() else ""
        if current == text:
            return 0
        diff = difflib.unified_diff(current.splitlines(keepends=True), text.splitlines(keepends=True),
                                    fromfile=f"{path} (committed)", tofile=f"{path} (generated)")
        sys.stderr.writelines(diff)
        sys.stderr.write(f"\n{path} is out of date; regenerate it with `python -m compiler.docs`\n")
        return 1
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
