"""Scowl text -> syntax tree (:mod:`compiler.nodes`), syntax errors -> diagnostics (SPEC §2, §2.5).

The grammar lives in ``grammar.lark`` (LALR(1), basic lexer, positions on).
A file is cut into *statement chunks*: a chunk starts at every line that
begins with ``name :=`` or ``event`` (neither can occur inside an
expression, so valid text is never split wrongly) and each chunk is parsed on
its own. A syntax error therefore costs one statement, and every broken
statement in every file is reported. A chunk that fails becomes a
:class:`~compiler.nodes.BrokenStatement` that still declares its feature name,
so the checker does not pile follow-on errors on top.

Syntax errors never escape as exceptions: lark's ``UnexpectedInput`` is turned
into a :class:`~compiler.diagnostics.Diagnostic`, with common mistakes named
through ``UnexpectedInput.match_examples`` (lark's
``examples/advanced/error_reporting_lalr.py`` idiom).

Source: SPEC §2.1-§2.5; STYLE "lark".
"""

from __future__ import annotations

import math
import re
from functools import lru_cache
from typing import Any

from lark import Lark, Token, Tree
from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken

from compiler import nodes as n
from compiler.diagnostics import Diagnostic, diag
from compiler.plan import Span

__all__ = ["parse_file", "get_parser", "KEYWORDS", "UNIT_SECONDS", "parse_iso_duration"]

#: Seconds per duration unit (singular; the plural is accepted too). SPEC §2.3.
UNIT_SECONDS: dict[str, int] = {"second": 1, "minute": 60, "hour": 3600, "day": 86400, "week": 604800}

#: Reserved words: they cannot be used as feature or event names.
KEYWORDS: frozenset[str] = frozenset(
    {"and", "as", "after", "by", "event", "exclusive", "false", "in", "is", "last", "limit",
     "not", "null", "or", "true", "where"}
    | set(UNIT_SECONDS) | {u + "s" for u in UNIT_SECONDS}
)

INT64_MAX = 2**63 - 1
#: Deepest syntax tree accepted: later stages recurse over expressions, and
#: ``Plan.dumps`` (orjson) refuses JSON nested more than 255 levels.
MAX_DEPTH = 100

_STMT_START = re.compile(r"[ \t\f\ufeff]*(?:event(?![A-Za-z0-9_])|[A-Za-z_][A-Za-z0-9_]*[ \t]*:=)")
_EVENT_LINE = re.compile(r"[ \t\f\ufeff]*event[ \t]+[A-Za-z_][A-Za-z0-9_]*[ \t\r]*(?:--.*)?\Z")
_CHUNK_FEATURE = re.compile(r"[ \t\f\ufeff]*([A-Za-z_][A-Za-z0-9_]*)[ \t]*:?=")
_CHUNK_EVENT = re.compile(r"[ \t\f\ufeff]*event[ \t]+([A-Za-z_][A-Za-z0-9_]*)")
_PATH_STEP = re.compile(
    r"\.([A-Za-z_][A-Za-z0-9_]*)|\[\s*(\d+)\s*\]|\[\s*(\"(?:[^\"\\\n]|\\.)*\"|'(?:[^'\\\n]|\\.)*')\s*\]"
)
_ISO = re.compile(
    r"P(?:(\d+)W)?(?:(\d+)D)?(?:T(?:(\d+(?:\.\d+)?)H)?(?:(\d+(?:\.\d+)?)M)?(?:(\d+(?:\.\d+)?)S)?)?"
)
_ESCAPES = {"\\": "\\", "'": "'", '"': '"', "n": "\n", "t": "\t", "r": "\r", "0": "\0"}


@lru_cache(maxsize=1)
def get_parser() -> Lark:
    """Return the (cached) lark LALR parser for ``grammar.lark``.

    Returns:
        A :class:`lark.Lark` with ``parser="lalr"``, ``lexer="basic"``,
        ``propagate_positions=True``; its start rule parses a sequence of
        statements.
    """
    return Lark.open(
        "grammar.lark",
        rel_to=__file__,
        parser="lalr",
        lexer="basic",
        propagate_positions=True,
        maybe_placeholders=True,
    )


def parse_iso_duration(text: str) -> float | None:
    """Return the seconds of an ISO-8601 duration like ``PT5H30M``, or ``None``.

    >>> parse_iso_duration("PT5H30M"), parse_iso_duration("P1W"), parse_iso_duration("PT0.5S")
    (19800.0, 604800.0, 0.5)
    """
    m = _ISO.fullmatch(text)
    if not m or not any(m.groups()):
        return None
    w, d, h, mi, s = (float(g) if g else 0.0 for g in m.groups())
    return w * 604800 + d * 86400 + h * 3600 + mi * 60 + s


def _unit_seconds(word: str) -> int:
    """Seconds in one ``word`` (``day``/``days`` ...)."""
    return UNIT_SECONDS[word[:-1] if word.endswith("s") and word[:-1] in UNIT_SECONDS else word]


# --------------------------------------------------------------------- chunks
def _chunks(text: str) -> list[tuple[int, str]]:
    """Split ``text`` into ``(first_line_index, chunk_text)`` statement chunks."""
    lines = text.split("\n")
    starts = [0]
    after_event = False
    for i, line in enumerate(lines):
        if i and (after_event or _STMT_START.match(line)):
            starts.append(i)
        # a complete `event NAME` line ends its statement: nothing can continue it
        after_event = bool(_EVENT_LINE.match(line))
    starts.append(len(lines))
    out = []
    for a, b in zip(starts, starts[1:]):
        chunk = "\n".join(lines[a:b])
        if chunk.strip():
            out.append((a, chunk))
    return out


def parse_file(path: str, text: str) -> tuple[n.SourceFile, list[Diagnostic]]:
    """Parse one ``.scowl`` file.

    Args:
        path: file name used in spans (relative to the topology root).
        text: its contents.

    Returns:
        ``(source_file, diagnostics)``; diagnostics are syntax and literal
        errors (codes ``E01xx``). Never raises on bad input.

    Source: SPEC §2.1, §2.5.
    """
    if text.startswith("\ufeff"):
        text = " " + text[1:]
    parser = get_parser()
    statements: list[n.Statement] = []
    diags: list[Diagnostic] = []
    for offset, chunk in _chunks(text):
        builder = _Builder(path, offset)
        try:
            tree = parser.parse(chunk)
        except UnexpectedInput as e:
            diags.append(_syntax_diagnostic(e, path, offset, chunk))
            statements.append(_broken(path, offset, chunk))
            continue
        deep = _too_deep(tree)
        if deep is not None:
            diags.append(diag("E0113", builder.span(deep), f"expression is nested more than {MAX_DEPTH} levels deep",
                              "split it into several features"))
            statements.append(_broken(path, offset, chunk))
            continue
        stmts = builder.build(tree)
        diags.extend(builder.diags)
        statements.extend(stmts)
    return n.SourceFile(path, tuple(statements)), diags


def _too_deep(tree: Tree) -> Tree | None:
    """The first statement nested deeper than :data:`MAX_DEPTH`, or ``None`` (iterative)."""
    for stmt in tree.children:
        stack = [(stmt, 0)]
        while stack:
            t, depth = stack.pop()
            if depth > MAX_DEPTH:
                return stmt
            for c in t.children:
                if isinstance(c, Tree):
                    stack.append((c, depth + 1))
    return None


def _broken(path: str, offset: int, chunk: str) -> n.BrokenStatement:
    first = chunk.split("\n", 1)[0]
    fm = _CHUNK_FEATURE.match(first)
    em = _CHUNK_EVENT.match(first)
    span = Span(path, offset + 1, 1, offset + 1, len(first) + 1)
    event = em.group(1) if em else ("" if re.match(r"[ \t\f\ufeff]*event(?![A-Za-z0-9_])", first) else None)
    return n.BrokenStatement(fm.group(1) if fm else None, event, span)


# ------------------------------------------------------------- syntax errors
_TERMINAL_NAMES = {
    "IDENT": "a name",
    "INT": "an integer",
    "FLOAT": "a number",
    "STRING": "a string",
    "PATH": "an input path like `$.field`",
    "UNIT": "a duration unit",
    "ISO_DURATION": "an ISO duration",
    "SCOPED_FN": "an aggregate with a scope",
    "$END": "end of input",
}
_EXPR_START = {"IDENT", "INT", "FLOAT", "STRING", "UNIT", "ISO_DURATION", "SCOPED_FN", "LPAR", "LSQB",
               "MINUS", "TILDE", "TRUE", "FALSE", "NULL", "NOT"}
_OPERATOR_VALUES = {"+", "-", "*", "/", "//", "%", "<<", ">>", "&", "^", "|", "=", "!=", "~=", "<", ">",
                    "<=", ">=", "in", "not", "is", "and", "or", ".", "["}

# match_examples labels: (code, message or None for the generic one, hint)
_EXAMPLES: list[tuple[tuple[str, str | None, str | None], list[str]]] = [
    (("E0105", "`==` is not an operator; equality is a single `=`", "write `a = b`"),
     ["x := a == b", "x := Count(where a == b)"]),
    (("E0106", "expected `:=` after the feature name", "define a feature with `name := expression`"),
     ["x = 1", "x 1", "event e x = 1", "event e y := 1 x = 1"]),
    (("E0101", None, "logical operators are `and`, `or`, `not`"),
     ["x := a && b", "x := a || b"]),
    (("E0109", "an input path needs a type: `$.a as int`", "add `as bool|int|float|string|time`"),
     ["x := $.a", "x := $.a 1"]),
    (("E0101", None, "write the type name: `as int`, `as string?`, `as float ? 0`"),
     ["x := $.a as 1", "x := $.a as"]),
    (("E0101", None, "`is` only tests for null: `x is null`, `x is not null`"),
     ["x := a is 1", "x := a is not 1"]),
    (("E0101", None, "comparisons do not chain; write `a < b and b < c`"),
     ["x := a < b < c", "x := a = b = c"]),
]


def _tok_span(path: str, offset: int, tok: Token) -> Span:
    line = (tok.line or 1) + offset
    col = tok.column or 1
    end_line = (tok.end_line or tok.line or 1) + offset
    end_col = tok.end_column if tok.end_column is not None else col + max(len(tok), 1)
    if end_line == line and end_col <= col:
        end_col = col + 1
    return Span(path, line, col, end_line, end_col)


def _end_span(path: str, offset: int, chunk: str) -> Span:
    """Span just after the last token of ``chunk`` (for unexpected end of input)."""
    last = None
    try:
        for tok in get_parser().lex(chunk):
            last = tok
    except Exception:  # noqa: BLE001 -- best effort
        last = None
    if last is None:
        return Span(path, offset + 1, 1, offset + 1, 2)
    line = (last.end_line or last.line) + offset
    col = last.end_column or (last.column + len(last))
    return Span(path, line, col, line, col + 1)


def _describe_token(tok: Token) -> str:
    if tok.type == "$END":
        return "end of input"
    text = str(tok)
    if len(text) > 30:
        text = text[:27] + "..."
    return f"'{text}'"


def _describe_expected(names: set[str]) -> str:
    parser = get_parser()
    items: list[str] = []
    names = set(names)
    if {"IDENT", "INT", "STRING"} <= names:
        items.append("an expression")
        names -= _EXPR_START
    values: dict[str, str] = {}
    for name in names:
        if name in _TERMINAL_NAMES:
            values[name] = _TERMINAL_NAMES[name]
            continue
        try:
            term = parser.get_terminal(name)
            values[name] = f"'{term.pattern.value}'"
        except Exception:  # noqa: BLE001
            values[name] = name
    ops = {k for k, v in values.items() if v.strip("'") in _OPERATOR_VALUES}
    if len(ops) > 4:
        items.append("an operator")
        for k in ops:
            values.pop(k)
    items.extend(sorted(values.values()))
    if not items:
        return ""
    if len(items) > 10:
        items = items[:10] + ["..."]
    return items[0] if len(items) == 1 else "one of " + ", ".join(items)


def _syntax_diagnostic(e: UnexpectedInput, path: str, offset: int, chunk: str) -> Diagnostic:
    """Turn a lark error into a diagnostic (E0101-E0109)."""
    parser = get_parser()
    if isinstance(e, UnexpectedCharacters):
        ch = chunk[e.pos_in_stream] if 0 <= e.pos_in_stream < len(chunk) else "?"
        span = Span(path, e.line + offset, e.column, e.line + offset, e.column + 1)
        if ch in "'\"":
            return diag("E0108", span, "unterminated string literal",
                        "a string ends on the line it starts, with the same quote")
        if ch == "=" and chunk[e.pos_in_stream - 1: e.pos_in_stream] == "=":
            return diag("E0105", span, "`==` is not an operator; equality is a single `=`", "write `a = b`")
        hint = None
        if ch == "#":
            hint = "comments start with `--`"
        elif ch == ":":
            hint = "a feature is defined with `:=`"
        elif ch == "!":
            hint = "`!=` is not equal; negation is `not`"
        elif ch in "&|" and chunk[e.pos_in_stream: e.pos_in_stream + 2] in ("&&", "||"):
            hint = "logical operators are `and` / `or`"
        return diag("E0102", span, f"unexpected character {ch!r}", hint)
    if isinstance(e, UnexpectedToken) and e.token.type != "$END":
        tok = e.token
        span = _tok_span(path, offset, tok)
        expected = set(getattr(e, "accepts", None) or e.expected)
        if "IDENT" in expected and str(tok) in KEYWORDS:
            return diag("E0104", span, f"'{tok}' is a reserved word and cannot be used as a name",
                        "choose another name, e.g. '" + str(tok) + "_'")
        label = _match(e)
        if label is not None:
            code, message, hint = label
            if message is None:
                message = f"unexpected {_describe_token(tok)}"
            return diag(code, span, message, hint)
        want = _describe_expected(expected)
        msg = f"unexpected {_describe_token(tok)}" + (f"; expected {want}" if want else "")
        return diag("E0101", span, msg)
    # end of input (UnexpectedEOF, or UnexpectedToken at $END)
    span = _end_span(path, offset, chunk)
    label = _match(e) if isinstance(e, UnexpectedToken) else None
    if label is not None and label[1] is not None:
        return diag(label[0], span, label[1], label[2])
    expected = set(getattr(e, "accepts", None) or getattr(e, "expected", None) or ())
    want = _describe_expected(expected)
    msg = "unexpected end of statement" + (f"; expected {want}" if want else "")
    hint = label[2] if label is not None else _open_bracket_hint(chunk)
    return diag("E0103", span, msg, hint)


def _open_bracket_hint(chunk: str) -> str | None:
    """Return a hint when ``chunk`` has more opening than closing brackets."""
    depth = 0
    try:
        for tok in get_parser().lex(chunk):
            if tok.type in ("LPAR", "LSQB"):
                depth += 1
            elif tok.type in ("RPAR", "RSQB"):
                depth -= 1
    except Exception:  # noqa: BLE001 -- best effort
        return None
    return "a bracket is left open" if depth > 0 else None


@lru_cache(maxsize=1)
def _example_errors() -> dict[str, UnexpectedInput | None]:
    """The error each :data:`_EXAMPLES` text raises (``None`` if it parses), parsed once per process.

    lark's ``UnexpectedInput.match_examples`` parses every example again on
    each call; :func:`_match` hands it these instead, so a syntax error costs
    one comparison per example, not one parse (a tenth of the compiler fuzz's
    time went to re-parsing them). ``accepts`` is computed here, while each
    error's parser state is the one it failed in.

    Returns:
        example text -> its ``UnexpectedInput`` or ``None``.
    """
    parse = get_parser().parse
    errors: dict[str, UnexpectedInput | None] = {}
    for _, texts in _EXAMPLES:
        for text in texts:
            try:
                parse(text)
                errors[text] = None
            except UnexpectedInput as ut:
                if isinstance(ut, UnexpectedToken):
                    ut.accepts  # noqa: B018 -- computed now (lazy in lark)
                errors[text] = ut
    _release(errors)
    return errors


def _raise_example_error(text: str) -> None:
    """``match_examples``'s parse function over :func:`_example_errors`: raise ``text``'s stored error, if any."""
    error = _example_errors()[text]
    if error is not None:
        raise error.with_traceback(None)  # a fresh traceback, not one grown by every raise


def _release(errors: dict[str, UnexpectedInput | None]) -> None:
    """Drop the traceback and context a raise attached to each of ``errors`` (:func:`_example_errors`).

    Raising a stored error gives it a traceback (lark's ``match_examples``
    frame, which holds the user's error) and a context; left there, the
    cache would keep the last compile's error and its frames alive.
    """
    for error in errors.values():
        if error is not None:
            error.__traceback__ = None
            error.__context__ = None


def _match(e: UnexpectedInput) -> tuple[str, str | None, str | None] | None:
    """The label of :data:`_EXAMPLES` whose error matches ``e`` (lark's ``match_examples``), or ``None``."""
    if getattr(e, "state", None) is None:
        return None
    try:
        return e.match_examples(_raise_example_error, _EXAMPLES, use_accepts=True)
    except Exception:  # noqa: BLE001 -- never let error reporting fail
        return None
    finally:
        _release(_example_errors())


# ------------------------------------------------------------ tree -> nodes
_BINARY = {"or", "and", "eq", "ne", "match", "lt", "gt", "le", "ge", "in", "not_in", "bitor", "bitxor",
           "bitand", "shl", "shr", "add", "sub", "mul", "div", "floordiv", "mod"}
_UNARY = {"not", "neg", "bitnot"}


class _Builder:
    """Turn a lark tree into :mod:`compiler.nodes`, collecting literal errors."""

    def __init__(self, path: str, offset: int):
        self.path = path
        self.offset = offset
        self.diags: list[Diagnostic] = []

    # -- spans
    def span(self, item: Any) -> Span:
        if isinstance(item, Token):
            return _tok_span(self.path, self.offset, item)
        meta = item.meta
        if getattr(meta, "empty", True):
            return Span(self.path, self.offset + 1, 1, self.offset + 1, 2)
        return Span(self.path, meta.line + self.offset, meta.column, meta.end_line + self.offset, meta.end_column)

    def build(self, tree: Tree) -> list[n.Statement]:
        out: list[n.Statement] = []
        for child in tree.children:
            if child.data == "event_decl":
                tok = child.children[0]
                out.append(n.EventDecl(str(tok), self.span(tok), self.span(child)))
            else:
                tok, rhs = child.children
                out.append(n.FeatureDecl(str(tok), self.span(tok), self.rhs(rhs), self.span(child)))
        return out

    def rhs(self, t: Any) -> n.InputDef | n.ExprNode:
        if isinstance(t, Tree) and t.data == "input_def":
            return self.input_def(t)
        return self.expr(t)

    def input_def(self, t: Tree) -> n.InputDef:
        path_tok, type_tok, opt = t.children
        path = self.path_steps(path_tok)
        optional = opt is not None
        default = None
        if opt is not None and opt.children and opt.children[0] is not None:
            default = self.expr(opt.children[0])
        return n.InputDef(path, self.span(path_tok), str(type_tok), self.span(type_tok), optional,
                          default, self.span(t))

    def path_steps(self, tok: Token) -> tuple[str | int, ...]:
        text = str(tok)[1:]
        steps: list[str | int] = []
        pos = 0
        while pos < len(text):
            m = _PATH_STEP.match(text, pos)
            if m is None:  # cannot happen: the token regex has the same shape
                break
            if m.group(1) is not None:
                steps.append(m.group(1))
            elif m.group(2) is not None:
                steps.append(int(m.group(2)))
            else:
                steps.append(self.unquote(m.group(3), tok))
            pos = m.end()
        return tuple(steps)

    def unquote(self, text: str, tok: Token) -> str:
        body = text[1:-1]
        out: list[str] = []
        i = 0
        while i < len(body):
            c = body[i]
            if c != "\\":
                out.append(c)
                i += 1
                continue
            nxt = body[i + 1] if i + 1 < len(body) else ""
            if nxt in _ESCAPES:
                out.append(_ESCAPES[nxt])
                i += 2
            elif nxt == "u" and re.fullmatch(r"[0-9a-fA-F]{4}", body[i + 2: i + 6] or ""):
                out.append(chr(int(body[i + 2: i + 6], 16)))
                i += 6
            else:
                self.diags.append(diag("E0108", self.span(tok), f"unknown escape '\\{nxt}' in string",
                                       "escapes are \\\\ \\' \\\" \\n \\t \\r \\0 \\uXXXX"))
                out.append(nxt)
                i += 2
        return "".join(out)

    # -- literals
    def int_value(self, tok: Token, negative: bool = False) -> int:
        v = int(str(tok))
        if negative:
            v = -v
        if v > INT64_MAX or v < -INT64_MAX - 1:
            self.diags.append(diag("E0108", self.span(tok), f"integer {tok} does not fit in 64 bits",
                                   "use a float literal, e.g. 1.0e20"))
            return 0
        return v

    def float_value(self, tok: Token, negative: bool = False) -> float:
        v = float(str(tok))
        if math.isinf(v):
            self.diags.append(diag("E0108", self.span(tok), f"number {tok} is too large"))
            v = 0.0
        return -v if negative else v

    def expr(self, t: Any) -> n.ExprNode:
        if isinstance(t, Token):  # cannot happen with the grammar's aliases
            return n.Name(str(t), self.span(t))
        d = t.data
        sp = self.span(t)
        ch = [c for c in t.children if c is not None]
        if d in _BINARY:
            return n.Binary(str(d), self.expr(ch[0]), self.expr(ch[1]), sp)
        if d in _UNARY:
            return n.Unary(str(d), self.expr(ch[0]), sp)
        if d in ("is_null", "is_not_null"):
            return n.IsNull(self.expr(ch[0]), d == "is_not_null", sp)
        if d == "int_lit":
            return n.Literal("int", self.int_value(ch[0]), str(ch[0]), sp)
        if d == "neg_int_lit":
            return n.Literal("int", self.int_value(ch[0], True), "-" + str(ch[0]), sp)
        if d == "float_lit":
            return n.Literal("float", self.float_value(ch[0]), str(ch[0]), sp)
        if d == "neg_float_lit":
            return n.Literal("float", self.float_value(ch[0], True), "-" + str(ch[0]), sp)
        if d == "string_lit":
            return n.Literal("string", self.unquote(str(ch[0]), ch[0]), str(ch[0]), sp)
        if d in ("true_lit", "false_lit"):
            return n.Literal("bool", d == "true_lit", d[:-4], sp)
        if d == "null_lit":
            return n.Literal("null", None, "null", sp)
        if d == "duration_lit":
            num, unit = ch
            per = _unit_seconds(str(unit))
            v = float(str(num)) * per
            if math.isinf(v):
                self.diags.append(diag("E0108", sp, "duration is too large"))
                v = 0.0
            return n.Literal("duration", v, f"{num} {unit}", sp)
        if d == "unit_lit":
            unit = str(ch[0])
            per = _unit_seconds(unit)
            return n.Literal("duration", float(per), unit, sp)
        if d == "iso_duration_lit":
            v = parse_iso_duration(str(ch[0]))
            if v is None or math.isinf(v):
                self.diags.append(diag("E0108", sp, f"bad ISO-8601 duration '{ch[0]}'"))
                v = 0.0
            return n.Literal("duration", v, str(ch[0]), sp)
        if d == "name":
            return n.Name(str(ch[0]), sp)
        if d == "field":
            return n.Access(self.expr(ch[0]), str(ch[1]), None, sp)
        if d == "index":
            return n.Access(self.expr(ch[0]), None, self.expr(ch[1]), sp)
        if d == "tuple_lit":
            return n.ListLit(tuple(self.expr(c) for c in ch), "(", sp)
        if d == "list_lit":
            return n.ListLit(tuple(self.expr(c) for c in ch), "[", sp)
        if d in ("call", "scoped_call"):
            return self.call(t, d == "scoped_call")
        raise ValueError(f"unexpected parse node {d}")  # a grammar/builder mismatch (E9999)

    def call(self, t: Tree, scoped: bool) -> n.Call:
        ch = [c for c in t.children if c is not None]
        head = ch[0]
        scope: tuple[n.Name, ...] | None = None
        rest = ch[1:]
        if scoped:
            raw = str(head)
            name = raw[:-1].rstrip()
            hs = self.span(head)
            name_span = Span(hs.file, hs.line, hs.col, hs.line, hs.col + len(name))
            scope_tree = rest[0]
            scope = tuple(n.Name(str(tok), self.span(tok)) for tok in scope_tree.children)
            rest = rest[1:]
        else:
            name = str(head)
            name_span = self.span(head)
        args: tuple[n.ExprNode, ...] = ()
        clauses: list[n.Clause] = []
        for c in rest:
            if isinstance(c, Tree) and c.data == "args":
                args = tuple(self.expr(a) for a in c.children)
            elif isinstance(c, Tree):
                clauses.append(self.clause(c))
        return n.Call(name, name_span, scope, args, tuple(clauses), self.span(t))

    def clause(self, t: Tree) -> n.Clause:
        d = t.data
        sp = self.span(t)
        ch = [c for c in t.children if c is not None]
        if d == "by_clause":
            keys = []
            for k in ch:
                kc = k.children
                write = n.Name(str(kc[1]), self.span(kc[1])) if len(kc) > 1 and kc[1] is not None else None
                keys.append(n.ByKey(self.expr(kc[0]), write, self.span(k)))
            return n.ByClause(tuple(keys), sp)
        if d == "where_clause":
            return n.WhereClause(self.expr(ch[0]), sp)
        if d == "after_clause":
            return n.AfterClause(self.expr(ch[0]), sp)
        if d == "last_clause":
            return n.LastClause(self.expr(ch[0]), sp)
        if d == "limit_clause":
            return n.LimitClause(self.expr(ch[0]), sp)
        return n.ExclusiveClause(sp)
