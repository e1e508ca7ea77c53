"""Compiler diagnostics: codes, the :class:`Diagnostic` record and rendering (SPEC §2.5).

Every compile error names its file and ``line:col-line:col`` span, a stable
code with a kebab-case name, a one-line message and, where it helps, a hint::

    flights.scowl:12:30-12:33: error E0203 after-not-a-time-feature: `after` needs a time feature; 'tag' is string
       12 | x := Count(by origin after tag)
          |                            ^^^
      hint: after takes the name of a `time` feature of the reading event

:data:`CODES` is the single table of codes (code, name, description,
example); docs and the golden tests are generated from it.

Source: SPEC §2.5; layout after sqlglot ``errors.py`` and rustc.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable, NamedTuple

from compiler.plan import Span


class Code(NamedTuple):
    """One diagnostic code.

    Attributes:
        code: stable code, e.g. ``E0203``.
        name: kebab-case name, e.g. ``after-not-a-time-feature``.
        description: one line, for docs.
        example: a small Scowl line (or lines) that triggers the code.
        context: the whole example file, with ``{example}`` standing for
            :attr:`example`; it defines whatever the example needs (the
            features and events it names) so that compiling it reports this
            code and no other (``tests/compiler/test_docs.py`` checks that).
            Empty for the codes that no source text can trigger (an
            unreadable file, an empty directory, a compiler bug).
    """

    code: str
    name: str
    description: str
    example: str
    context: str = "event e\n{example}\n"

    def source(self) -> str | None:
        """Return the example file text (:attr:`context` around :attr:`example`).

        Returns:
            Scowl source text, or ``None`` when the code cannot be triggered
            from source text (see :attr:`context`).

        >>> lookup("E0204").source()
        'event e\\nt := $.t as time\\nn := DecayedCount(after t)\\n'
        """
        if not self.context:
            return None
        return self.context.replace("{example}", self.example)


def _with(*lines: str) -> str:
    """Context: ``event e``, the given feature lines, then the example."""
    return "event e\n" + "".join(line + "\n" for line in lines) + "{example}\n"


def _and_events(context: str, *sections: str) -> str:
    """Context ``context`` followed by further ``event`` sections (each a block of lines)."""
    return context + "".join("\n" + s.strip("\n") + "\n" for s in sections)


#: Every diagnostic the compiler can emit. Codes are stable: never renumber.
CODES: tuple[Code, ...] = (
    # ---- E01xx: files and syntax
    Code("E0101", "syntax-error", "The text does not parse here.", "x := (1 + )"),
    Code("E0102", "unexpected-character", "A character that starts no token.", "x := 1 # 2"),
    Code("E0103", "unexpected-end-of-input", "The statement stops before it is complete.", "x := Count(by k"),
    Code("E0104", "reserved-word", "A reserved word is used where a name is expected.", "limit := $.limit as int"),
    Code("E0105", "double-equals", "Equality is a single `=`.", "x := a == b",
         _with("a := $.a as int", "b := $.b as int")),
    Code("E0106", "missing-define", "A feature is defined with `:=`.", "x = 1"),
    Code("E0107", "feature-outside-event", "A feature appears before any `event NAME` line.",
         "x := 1  -- first line", "{example}\nevent e\n"),
    Code("E0108", "bad-literal", "A malformed literal (string escape, integer too large, ...).", "x := 'a\\q'"),
    Code("E0109", "input-needs-type", "An input path must say its type: `$.a as int`.", "x := $.a"),
    Code("E0110", "unreadable-file", "A source file could not be read or is not UTF-8.", "(binary file)", ""),
    Code("E0111", "no-sources", "The topology directory holds no `*.scowl` file.", "(empty directory)", ""),
    Code("E0112", "bad-input-path", "An input path must name a field of the payload.", "x := $ as int"),
    Code("E0113", "too-deeply-nested", "An expression is nested too deeply (more than 100 levels).",
         "x := " + "~" * 101 + "1"),
    # ---- E02xx: aggregates and clauses
    Code("E0201", "clause-out-of-order", "Aggregate clauses go: by, where, after, last, limit, exclusive.",
         "n := Count(last 1 day by k)", _with("k := $.k as string")),
    Code("E0202", "duplicate-clause", "A clause is given twice.", "n := Count(last 1 day last 2 days)"),
    Code("E0203", "after-not-a-time-feature", "`after` takes the name of a time feature of the reading event.",
         "n := Count(after k)", _with("k := $.k as string")),
    Code("E0204", "after-on-approximate", "`after` is not allowed on Decayed* or HyperLogLog.",
         "n := DecayedCount(after t)", _with("t := $.t as time")),
    Code("E0205", "last-not-constant", "`last` needs a constant duration.", "n := Count(last k)",
         _with("k := $.k as int")),
    Code("E0206", "bad-window", "A window must be whole seconds, at least 1 second and at most 10,000 years.",
         "n := Count(last 0.5 seconds)"),
    Code("E0207", "limit-not-constant", "`limit` needs an integer constant.", "n := Count(limit k)",
         _with("k := $.k as int")),
    Code("E0208", "limit-out-of-range", "`limit` must be 1 to 1000.", "n := Count(limit 5000)"),
    Code("E0209", "exclusive-on-cross-event", "`exclusive` is only for common aggregates.",
         "n := Count<other>(exclusive)", _and_events(_with(), "event other\nx := $.x as int")),
    Code("E0210", "wrong-value-count", "The aggregate takes a different number of values.", "n := Sum()"),
    Code("E0211", "value-not-a-feature", "Aggregate values are feature names, not expressions.",
         "n := Sum(x * 2)", _with("x := $.x as int")),
    Code("E0212", "value-missing-in-scope-event", "A value feature is not defined in a scope event.",
         "n := Sum<other>(x)", _and_events(_with("x := $.x as int"), "event other\ny := $.y as int")),
    Code("E0213", "key-missing-in-writer", "The write key is not a feature of a writer event.",
         "n := Count<other>(by k)", _and_events(_with("k := $.k as string"), "event other\nid := $.id as string")),
    Code("E0214", "key-not-a-feature", "A `by` key is a feature name, not an expression.",
         "n := Count(by k + 1)", _with("k := $.k as int")),
    Code("E0215", "key-type-mismatch", "Read key and write key have different types.",
         "n := Count<other>(by k as w)", _and_events(_with("k := $.k as string"), "event other\nw := $.w as int")),
    Code("E0216", "bad-value-type", "The aggregate does not accept a value of this type.", "n := Sum(name)",
         _with("name := $.name as string")),
    Code("E0217", "where-not-bool", "A `where` condition must be boolean.", "n := Count(where k)",
         _with("k := $.k as int")),
    Code("E0219", "clause-on-scalar-function", "Scope and clauses are only for aggregates.",
         "n := Len(s by k)", _with("s := $.s as string", "k := $.k as string")),
    Code("E0220", "value-type-mismatch-across-writers", "Scope events give a value or key different types.",
         "n := Latest<a, b>(x)", _and_events(_with(), "event a\nx := $.x as int", "event b\nx := $.x as string")),
    Code("E0221", "bad-key-type", "A key must be bool, int, float, string, time or duration.",
         "n := Count(by recent)", _with("x := $.x as int", "recent := Sequence(x)")),
    Code("E0222", "limit-on-approximate", "`limit` is not allowed on Decayed* or HyperLogLog (O(1) state).",
         "n := DecayedCount(limit 5)"),
    Code("E0223", "aggregate-in-clause",
         "An aggregate cannot stand in `where`, a `by` key, `after`, `last`, `limit` or as a value "
         "(anywhere else in an expression it can).",
         "n := Count(by k where Count(by k) > 1)", _with("k := $.k as string")),
    # ---- E03xx: names
    Code("E0301", "unknown-feature", "No feature of that name in the event.", "x := y + 1"),
    Code("E0302", "unknown-event", "No event of that name in the topology.", "n := Count<nosuch>()"),
    Code("E0303", "unknown-function", "No built-in or aggregate function of that name.", "n := Cnt()"),
    Code("E0304", "duplicate-feature", "A feature name is defined twice in one event.", "x := 1\nx := 2"),
    Code("E0305", "invalid-name", "Names are `[a-z_][a-z0-9_]*`.", "Total := 1"),
    Code("E0306", "cycle", "Features depend on each other in a cycle.", "x := y\ny := x"),
    Code("E0307", "unknown-type", "Input types are bool, int, float, string, time.", "x := $.a as integer"),
    # ---- E04xx: types and expressions
    Code("E0401", "type-mismatch", "An operator or function gets operands of the wrong type.", "x := 'a' - 1"),
    Code("E0402", "wrong-argument-count", "A built-in gets the wrong number of arguments.", "x := Len()"),
    Code("E0403", "bad-default", "An input default does not fit the input type.", "x := $.a as int ? 'z'"),
    Code("E0404", "in-needs-list", "`in` needs a literal list `(a, b)` or `[a, b]`.", "x := a in b",
         _with("a := $.a as int", "b := $.b as int")),
    Code("E0405", "unsupported-access", "A tuple index must be an integer constant in range.",
         "x := p[0][a]", _with("a := $.a as int", "b := $.b as string", "p := Set(a, b)")),
    Code("E0406", "bad-regex", "The pattern of `~=` must be a valid regular expression string literal.",
         "x := s ~= '('", _with("s := $.s as string")),
    Code("E0407", "unknown-field", "`.name` names no field of the struct.",
         "x := p.c", _with("a := $.a as int", "b := $.b as string", "p := Latest(a, b)")),
    # ---- E9xxx: the compiler itself
    Code("E9999", "internal-error", "A bug in the compiler; please report it.", "", ""),
)

#: Codes no longer emitted; never reused. E0218 (``aggregate-in-expression``)
#: was retired when aggregates became legal inside expressions (SPEC §2.4).
RETIRED: dict[str, str] = {
    "E0218": "aggregate-in-expression: an aggregate had to be a feature's whole definition",
}

_BY_CODE = {c.code: c for c in CODES}
_BY_NAME = {c.name: c for c in CODES}


def lookup(code_or_name: str) -> Code:
    """Return the :class:`Code` for ``"E0203"`` or ``"after-not-a-time-feature"``.

    Raises:
        KeyError: unknown code.
    """
    if code_or_name in _BY_CODE:
        return _BY_CODE[code_or_name]
    return _BY_NAME[code_or_name]


@dataclass(frozen=True)
class Diagnostic:
    """One compile error (SPEC §2.5).

    Attributes:
        code: stable code, e.g. ``E0203``.
        name: kebab-case name, e.g. ``after-not-a-time-feature``.
        span: where (file and ``line:col-end_line:end_col``, end exclusive).
        message: one line.
        hint: how to fix it, or ``None``.
        severity: always ``"error"`` in v1.
    """

    code: str
    name: str
    span: Span
    message: str
    hint: str | None = None
    severity: str = "error"

    def header(self) -> str:
        """Return ``file:line:col-line:col: error CODE name: message``."""
        return f"{self.span}: {self.severity} {self.code} {self.name}: {self.message}"

    def render(self, source_text_by_file: dict[str, str] | None = None) -> str:
        """Render the header, the source line with a caret underline, and the hint.

        Args:
            source_text_by_file: file name -> source text; when the span's
                file is missing (or the line is out of range) only the header
                and hint are printed.

        Returns:
            Multi-line text without a trailing newline.
        """
        out = [self.header()]
        text = (source_text_by_file or {}).get(self.span.file)
        if text is not None:
            lines = text.split("\n")
            if 1 <= self.span.line <= len(lines):
                src = lines[self.span.line - 1].rstrip("\r").replace("\t", " ")
                start = max(self.span.col, 1)
                if self.span.end_line == self.span.line:
                    end = max(self.span.end_col, start + 1)
                else:
                    end = max(len(src) + 1, start + 1)
                gutter = str(self.span.line)
                pad = " " * len(gutter)
                out.append(f" {gutter} | {src}")
                out.append(f" {pad} | " + " " * (start - 1) + "^" * (end - start))
        if self.hint:
            out.append(f"  hint: {self.hint}")
        return "\n".join(out)


def diag(code_or_name: str, span: Span, message: str, hint: str | None = None) -> Diagnostic:
    """Build a :class:`Diagnostic` from a code or name in :data:`CODES`.

    Raises:
        KeyError: unknown code (a compiler bug).

    >>> from compiler.plan import Span
    >>> diag("E0301", Span("a.scowl", 1, 6, 1, 7), "unknown feature 'y'").header()
    "a.scowl:1:6-1:7: error E0301 unknown-feature: unknown feature 'y'"
    """
    c = lookup(code_or_name)
    return Diagnostic(c.code, c.name, span, message, hint)


def sort_key(d: Diagnostic) -> tuple:
    """Order diagnostics by file, position, then code."""
    s = d.span
    return (s.file, s.line, s.col, s.end_line, s.end_col, d.code, d.message)


def render_all(diagnostics: Iterable[Diagnostic], source_text_by_file: dict[str, str] | None = None) -> str:
    """Render diagnostics (in the given order) separated by blank lines, plus a summary line.

    Returns:
        ``""`` when there are none.
    """
    diags = list(diagnostics)
    if not diags:
        return ""
    parts = [d.render(source_text_by_file) for d in diags]
    n = len(diags)
    parts.append(f"{n} error{'s' if n != 1 else ''}")
    return "\n\n".join(parts) + "\n"


def codes_markdown() -> str:
    """Return the code table as a Markdown table (for docs)."""
    rows = ["| Code | Name | Meaning | Example |", "|---|---|---|---|"]
    for c in CODES:
        ex = c.example.replace("\n", "⏎").replace("|", "\\|")
        rows.append(f"| {c.code} | `{c.name}` | {c.description} | `{ex}` |" if ex else
                    f"| {c.code} | `{c.name}` | {c.description} | |")
    return "\n".join(rows) + "\n"
