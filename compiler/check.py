"""Name resolution, typing, clause rules and cycles: syntax tree -> checked topology (SPEC §2).

:func:`check` takes the parsed files of a topology and returns a
:class:`CheckedTopology`: every event with its features (kind, type, typed
:class:`~compiler.plan.Expr` or :class:`~compiler.plan.InputSpec` or
:class:`AggInfo`, dependencies) and the features of each event in
dependency order, plus all diagnostics found. It never stops at the first
error and never raises on bad input.

Steps:

1. *collect* -- sections (reopenable across files; each file starts outside
   any section), feature names (``[a-z_][a-z0-9_]*``, unique per event).
   An aggregate written inside a scalar feature's expression (SPEC §2.4,
   e.g. ``d := Sum(x by k last 30 days) - Sum(x by k last 2 days)``) is
   *lifted* here into an unnamed aggregate feature ``<parent>#<k>`` of the
   same event (:attr:`FeatureInfo.inline_of`), and the expression refers to
   it by that name. From then on it is an aggregate like any other, so an
   identical named or inline aggregate gets the same definition hash and
   shares its state (:mod:`compiler.planner`). Aggregates in clauses
   (``where``, ``by`` keys, ``after``, ``last``, ``limit``) and as values
   stay illegal (E0223).
2. *type* -- :meth:`Checker.type_of` resolves a feature's type lazily and
   once, following references across events (an aggregate's type may depend
   on the types of its values in the writer events). A cycle that crosses
   events is reported here (E0306); cycles inside one event are reported by
   step 4.
3. *aggregates* -- scope, values, ``by`` keys (read and write side),
   ``where`` (typed in each writer event), ``after``, ``last``, ``limit``,
   ``exclusive`` and clause order (SPEC §2.4).
4. *order* -- per event, dependencies (:attr:`FeatureInfo.deps`) and a stable
   topological order; each cycle becomes one E0306 naming its path.

An expression that already has a diagnostic gets the internal type
``error``, which is accepted everywhere silently so one mistake gives one
message.

Source: SPEC §2.1-§2.5.
"""

from __future__ import annotations

import difflib
import heapq
import math
import re
from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import Any, Iterator

from compiler import nodes as n
from compiler.diagnostics import Diagnostic, diag
from compiler.functions import (
    AGGREGATES, ERROR, INPUT_TYPES, KEY_TYPES, NULL, SCALAR_FUNCTIONS, all_function_names, binary_result,
    canonical_function, signature, unary_result, unify, unify_all,
)
from compiler.parser import parse_iso_duration
from compiler.plan import Expr, InputSpec, Span
from compiler.typesystem import parse_type

__all__ = ["check", "CheckedTopology", "EventInfo", "FeatureInfo", "AggInfo", "parse_time_ms",
           "DEFAULT_WINDOW_S", "MAX_WINDOW_S", "MAX_LIMIT", "NAME_RE"]

#: Default ``last`` window: 30 days (SPEC §2.4).
DEFAULT_WINDOW_S = 30 * 86400
#: Longest ``last`` window: 10,000 Gregorian years, the whole range of event
#: times (years 0000-9999); a longer one would mean the same and could
#: overflow 64-bit millisecond arithmetic downstream.
MAX_WINDOW_S = 3_652_425 * 86400
#: Largest ``limit`` (SPEC §2.4).
MAX_LIMIT = 1000
#: Valid feature and event names (SPEC §2.1).
NAME_RE = re.compile(r"[a-z_][a-z0-9_]*\Z")

_OP_SYMBOL = {
    "neg": "unary -", "bitnot": "~", "mul": "*", "div": "/", "floordiv": "//", "mod": "%", "add": "+",
    "sub": "-", "shl": "<<", "shr": ">>", "bitand": "&", "bitxor": "^", "bitor": "|", "eq": "=", "ne": "!=",
    "match": "~=", "lt": "<", "gt": ">", "le": "<=", "ge": ">=", "in": "in", "not_in": "not in",
    "not": "not", "and": "and", "or": "or",
}


# ----------------------------------------------------------------- results
@dataclass
class AggInfo:
    """A checked aggregate feature (both sides).

    Attributes:
        function: canonical aggregate name.
        scopes: writer event types, sorted (``(reading event,)`` if common).
        common: the scope is exactly the reading event.
        read_keys: reading-event feature names of the key (``by`` order).
        write_keys: writer feature names of the key (same in every writer).
        values: writer feature names of the values.
        where: per writer event, the typed filter or ``None``.
        window_s, limit, exclusive, after: as written (defaults applied).
        value_types, key_types: types of values and key components.
    """

    function: str
    scopes: tuple[str, ...]
    common: bool
    read_keys: tuple[str, ...]
    write_keys: tuple[str, ...]
    values: tuple[str, ...]
    where: dict[str, Expr | None]
    window_s: int
    limit: int | None
    exclusive: bool
    after: str | None
    value_types: tuple[str, ...]
    key_types: tuple[str, ...]


@dataclass
class FeatureInfo:
    """One feature of one event after checking.

    Attributes:
        event, name: where it lives.
        index: declaration index within the event (across files).
        kind: ``input``, ``scalar``, ``aggregate`` or ``broken`` (failed to parse).
        decl: its :class:`~compiler.nodes.FeatureDecl` (``None`` if broken).
        span: the whole definition; name_span: just the name.
        type: result type (``error`` if it could not be typed).
        input, expr, agg: per kind.
        deps: same-event features it needs, sorted.
        inline_of: for an aggregate lifted out of a scalar expression (SPEC
            §2.4), the name of the feature that contains it; else ``None``.
        text: for such an aggregate, its source text (comments dropped,
            whitespace collapsed), or ``None``.
    """

    event: str
    name: str
    index: int
    kind: str
    decl: n.FeatureDecl | None
    span: Span
    name_span: Span
    type: str | None = None
    input: InputSpec | None = None
    expr: Expr | None = None
    agg: AggInfo | None = None
    deps: tuple[str, ...] = ()
    inline_of: str | None = None
    text: str | None = None


@dataclass
class EventInfo:
    """One event type: its features by name (declaration order) and the dependency order."""

    name: str
    span: Span
    features: dict[str, FeatureInfo] = field(default_factory=dict)
    order: list[str] = field(default_factory=list)


@dataclass
class CheckedTopology:
    """Result of :func:`check`: events by name and the diagnostics found."""

    events: dict[str, EventInfo]
    diagnostics: list[Diagnostic]


def check(files: list[n.SourceFile], sources: dict[str, str] | None = None) -> CheckedTopology:
    """Check a parsed topology.

    Args:
        files: parsed files in topology order (sorted path order).
        sources: file name -> source text, used only for the text of inline
            aggregates (:attr:`FeatureInfo.text`); without it that text is ``None``.

    Returns:
        A :class:`CheckedTopology`; its ``diagnostics`` are empty iff the
        topology is valid (the caller adds syntax diagnostics of its own).

    Source: SPEC §2.1-§2.5.
    """
    return Checker(files, sources).run()


def parse_time_ms(text: str) -> int | None:
    """Parse an ISO-8601 date/time to UTC epoch milliseconds (naive = UTC), or ``None``.

    >>> parse_time_ms("2021-04-12T22:43:46Z"), parse_time_ms("1970-01-02"), parse_time_ms("nope")
    (1618267426000, 86400000, None)
    """
    try:
        dt = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    delta = dt - datetime(1970, 1, 1, tzinfo=timezone.utc)
    return (delta.days * 86400 + delta.seconds) * 1000 + delta.microseconds // 1000


def _suggest(name: str, candidates: Any) -> str | None:
    """``did you mean 'x'?`` using difflib (case-insensitive), or ``None``."""
    cands = sorted(set(candidates))
    lowered = {c.lower(): c for c in cands}
    match = difflib.get_close_matches(name.lower(), list(lowered), n=1, cutoff=0.6)
    if match:
        return f"did you mean '{lowered[match[0]]}'?"
    return None


def _listing(what: str, names: Any, most: int = 8) -> str | None:
    """``features of 'e': a, b, c`` (at most ``most`` names, sorted), or ``None`` if there are none."""
    names = sorted(names)
    if not names:
        return None
    more = ", …" if len(names) > most else ""
    return f"{what}: {', '.join(names[:most])}{more}"


_WINDOW_HINT = "write a whole number of seconds or more, e.g. `last 90 seconds`, `last 30 minutes`, `last 7 days`"


def _a(type_text: Any) -> str:
    """A type's name with its indefinite article: ``"an int"``, ``"an array<string>"``, ``"a string"``.

    Args:
        type_text: a type (its ``str`` is used).

    Returns:
        ``"an <type>"`` when the name starts with a vowel letter, else ``"a <type>"``.
    """
    text = str(type_text)
    return ("an " if text[:1].lower() in "aeiou" and text else "a ") + text


def _snake(name: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])([A-Z])", r"_\1", name).lower()
    s = re.sub(r"[^a-z0-9_]", "_", s)
    if not s or not (s[0].isalpha() or s[0] == "_"):
        s = "_" + s
    return s


class _NotConst(Exception):
    """Raised by :func:`_fold` for a non-constant expression."""


class _FoldError(_NotConst):
    """Raised by :func:`_fold` for a constant that cannot be evaluated (``1 day / 0``)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _fold(e: Expr) -> Any:
    """Evaluate a constant typed expression (literals and arithmetic only).

    Raises:
        _NotConst: not a constant (or it holds an already-reported error).
        _FoldError: a constant that cannot be evaluated (division by zero, overflow).
    """
    if e.type == ERROR:
        raise _NotConst()
    if e.kind == "lit":
        return e.value
    if e.kind == "op":
        vals = [_fold(a) for a in e.args]
        if any(v is None for v in vals):
            return None
        a, b = vals if len(vals) == 2 else (None, None)
        try:
            if e.op == "neg":
                return -vals[0]
            if e.op == "add":
                return a + b
            if e.op == "sub":
                return a - b
            if e.op == "mul":
                return a * b
            if e.op == "div":
                return a / b
            if e.op == "floordiv":
                return a // b
            if e.op == "mod":
                return a % b
        except ZeroDivisionError:
            raise _FoldError("division by zero") from None
        except OverflowError:
            raise _FoldError("the value is too large") from None
        except TypeError:
            raise _NotConst() from None
    raise _NotConst()


def _reported_by_parser(lit: n.Literal) -> bool:
    """Whether the parser already rejected this literal (E0108) and put a 0 in its place.

    The checker then types it as ``error`` so that one mistake gives one
    message (``last 1e400 days`` is E0108 only, not also E0206).
    """
    if lit.value not in (0, 0.0) or isinstance(lit.value, bool):
        return False
    try:
        if lit.kind == "int":
            return int(lit.text) != 0
        if lit.kind == "float":
            return float(lit.text) != 0.0
        if lit.kind == "duration":
            number, _, unit = lit.text.partition(" ")
            if unit:
                return float(number) != 0.0
            if lit.text.startswith("P"):
                v = parse_iso_duration(lit.text)
                return v is None or math.isinf(v) or v != 0.0
    except (ValueError, OverflowError):
        return True
    return False


def _has_names(node: Any) -> bool:
    """Whether an expression node refers to features or calls functions."""
    if isinstance(node, (n.Name, n.Call, n.Access)):
        return True
    if isinstance(node, n.Unary):
        return _has_names(node.operand)
    if isinstance(node, n.Binary):
        return _has_names(node.left) or _has_names(node.right)
    if isinstance(node, n.IsNull):
        return _has_names(node.operand)
    if isinstance(node, n.ListLit):
        return any(_has_names(i) for i in node.items)
    return False


# ------------------------------------------------------------------ checker
class Checker:
    """Runs the checking steps over one topology; see the module docstring."""

    def __init__(self, files: list[n.SourceFile], sources: dict[str, str] | None = None):
        self.files = files
        self.sources = sources or {}
        #: the clause being checked (``where``, ``by``, ``value``, ...) while an
        #: aggregate's clauses are typed; an aggregate call there is E0223.
        self._clause: str | None = None
        self.diags: list[Diagnostic] = []
        self.events: dict[str, EventInfo] = {}
        self._types: dict[tuple[str, str], str] = {}
        self._active: list[tuple[str, str]] = []
        self._reported_cycles: set[frozenset] = set()

    def error(self, code: str, span: Span, message: str, hint: str | None = None) -> None:
        """Record a diagnostic."""
        self.diags.append(diag(code, span, message, hint))

    # ---------------------------------------------------------------- run
    def run(self) -> CheckedTopology:
        """Run all steps; return the checked topology."""
        self.collect()
        # type in an order where references come first, so type_of rarely recurses
        for ev_name, name in stable_topo(self._typing_graph()):
            self.type_of(ev_name, name)
        for ev in self.events.values():
            for f in ev.features.values():
                if f.kind == "aggregate":
                    self.analyze_aggregate(f)
        for ev in self.events.values():
            self.order(ev)
        return CheckedTopology(self.events, self.diags)

    def _typing_graph(self) -> dict[tuple[str, str], list[tuple[str, str]]]:
        """Syntactic type dependencies of every feature (all features, in declaration order)."""
        graph: dict[tuple[str, str], list[tuple[str, str]]] = {}
        for ev in self.events.values():
            for f in ev.features.values():
                deps: list[tuple[str, str]] = []
                if f.kind == "scalar":
                    deps = [(ev.name, nm) for nm in _names_in(f.decl.rhs) if nm in ev.features]
                elif f.kind == "aggregate":
                    call: n.Call = f.decl.rhs
                    writers, _ = self._writers(f)
                    for a in call.args:
                        if isinstance(a, n.Name):
                            deps.extend((w, a.name) for w in writers if a.name in self.events[w].features)
                graph[(ev.name, f.name)] = deps
        return graph

    # ------------------------------------------------------------ collect
    def _check_name(self, name: str, span: Span, what: str) -> None:
        if not NAME_RE.match(name):
            self.error("E0305", span, f"invalid {what} name '{name}'",
                       f"names are lower case letters, digits and '_', e.g. '{_snake(name)}'")

    def collect(self) -> None:
        """Step 1: sections and feature declarations."""
        for file in self.files:
            current: str | None = None
            skip = False
            for st in file.statements:
                if isinstance(st, n.EventDecl):
                    self._check_name(st.name, st.name_span, "event")
                    current, skip = st.name, False
                    self.events.setdefault(st.name, EventInfo(st.name, st.name_span))
                elif isinstance(st, n.BrokenStatement):
                    if st.event is not None:
                        current, skip = (st.event or None), not st.event
                        if st.event:
                            self.events.setdefault(st.event, EventInfo(st.event, st.span))
                    elif st.feature is not None and current is not None and not skip:
                        ev = self.events[current]
                        if st.feature not in ev.features:
                            ev.features[st.feature] = FeatureInfo(
                                current, st.feature, len(ev.features), "broken", None, st.span, st.span, ERROR)
                else:
                    if skip:
                        continue
                    if current is None:
                        self.error("E0107", st.name_span, f"feature '{st.name}' is not inside an event section",
                                   "start the file with `event NAME`; every file opens its own section")
                        continue
                    self._check_name(st.name, st.name_span, "feature")
                    ev = self.events[current]
                    if st.name in ev.features:
                        first = ev.features[st.name]
                        self.error("E0304", st.name_span,
                                   f"feature '{st.name}' is already defined in event '{current}'",
                                   f"first defined at {first.name_span}; rename one of them")
                        continue
                    rhs = st.rhs
                    if isinstance(rhs, n.InputDef):
                        kind = "input"
                    elif isinstance(rhs, n.Call) and canonical_function(rhs.name) in AGGREGATES:
                        kind = "aggregate"
                    else:
                        kind = "scalar"
                        st = self._lift_inline(ev, st)
                    ev.features[st.name] = FeatureInfo(current, st.name, len(ev.features), kind, st, st.span,
                                                       st.name_span)

    def _lift_inline(self, ev: EventInfo, decl: n.FeatureDecl) -> n.FeatureDecl:
        """Lift the aggregates inside scalar feature ``decl`` into unnamed features (SPEC §2.4).

        Each aggregate call (outermost only: an aggregate inside another's
        clauses stays put and is reported as E0223 when that clause is checked)
        becomes a feature ``<decl.name>#<k>`` (``k`` = 1, 2, ... in source
        order) of kind ``aggregate`` registered in ``ev`` before the parent,
        and is replaced in the expression by a reference to it.

        Returns:
            ``decl`` with its right-hand side rewritten (``decl`` itself when it
            holds no aggregate).
        """
        lifted: list[tuple[str, n.Call]] = []

        def walk(node: Any) -> Any:
            if isinstance(node, n.Call):
                if canonical_function(node.name) in AGGREGATES:
                    name = f"{decl.name}#{len(lifted) + 1}"
                    lifted.append((name, node))
                    return n.Name(name, node.span)
                args = tuple(walk(a) for a in node.args)
                return node if args == node.args else replace(node, args=args)
            if isinstance(node, n.Unary):
                return replace(node, operand=walk(node.operand))
            if isinstance(node, n.IsNull):
                return replace(node, operand=walk(node.operand))
            if isinstance(node, n.Binary):
                return replace(node, left=walk(node.left), right=walk(node.right))
            if isinstance(node, n.ListLit):
                return replace(node, items=tuple(walk(i) for i in node.items))
            if isinstance(node, n.Access):
                return replace(node, obj=walk(node.obj),
                               index=None if node.index is None else walk(node.index))
            return node

        rhs = walk(decl.rhs)
        if not lifted:
            return decl
        for name, call in lifted:
            sub = n.FeatureDecl(name, call.span, call, call.span)
            ev.features[name] = FeatureInfo(ev.name, name, len(ev.features), "aggregate", sub, call.span,
                                            call.span, inline_of=decl.name, text=self._source_text(call.span))
        return replace(decl, rhs=rhs)

    def _source_text(self, span: Span) -> str | None:
        """The source text under ``span``, comments dropped and whitespace collapsed (or ``None``)."""
        text = self.sources.get(span.file)
        if text is None:
            return None
        lines = text.split("\n")[span.line - 1: span.end_line]
        if not lines:
            return None
        if len(lines) == 1:
            lines[0] = lines[0][span.col - 1: span.end_col - 1]
        else:
            lines[0] = lines[0][span.col - 1:]
            lines[-1] = lines[-1][: span.end_col - 1]
        out = " ".join(re.sub(r"--.*", "", ln) for ln in lines)
        return " ".join(out.split()) or None

    # --------------------------------------------------------------- types
    def type_of(self, event: str, name: str) -> str:
        """Step 2: the type of feature ``name`` of ``event`` (computed once).

        Returns:
            A type name, or ``error`` (already diagnosed, or part of a cycle).
        """
        key = (event, name)
        if key in self._types:
            return self._types[key]
        if key in self._active:
            self._type_cycle(key)
            return ERROR
        f = self.events[event].features[name]
        self._active.append(key)
        try:
            t = self._compute_type(f)
        finally:
            self._active.pop()
        f.type = t
        self._types[key] = t
        return t

    def _type_cycle(self, key: tuple[str, str]) -> None:
        i = self._active.index(key)
        cycle = self._active[i:] + [key]
        if len({ev for ev, _ in cycle}) < 2:
            return  # reported by the per-event order step
        members = frozenset(cycle)
        if members in self._reported_cycles:
            return
        self._reported_cycles.add(members)
        f = self.events[key[0]].features[key[1]]
        path = " -> ".join(f"{ev}.{nm}" for ev, nm in cycle)
        self.error("E0306", f.name_span, f"cycle across events: {path}",
                   "an aggregate's type depends on its values' types in the writer events; break the loop")

    def _compute_type(self, f: FeatureInfo) -> str:
        if f.kind == "broken":
            return ERROR
        rhs = f.decl.rhs
        if f.kind == "input":
            return self.check_input(f, rhs)
        if f.kind == "scalar":
            f.expr = self.expr(rhs, f.event)
            return f.expr.type
        return self.aggregate_type(f)

    # -------------------------------------------------------------- inputs
    def check_input(self, f: FeatureInfo, d: n.InputDef) -> str:
        """Type of an input feature; sets ``f.input`` (SPEC §2.2)."""
        if not d.path:
            self.error("E0112", d.path_span, "an input path must name a field, like `$.user` or `$.a.b[0]`")
        t = d.type_name
        if t not in INPUT_TYPES:
            hint = _suggest(t, INPUT_TYPES) or "input types are bool, int, float, string, time"
            self.error("E0307", d.type_span, f"unknown input type '{t}'", hint)
            t = ERROR
        if d.default is None or d.default.kind == "null":
            f.input = InputSpec(d.path, optional=d.optional)
            return t
        lit = d.default
        value: Any = None
        ok = True
        if t == ERROR:
            ok = True
        elif t == "int":
            ok = lit.kind == "int"
            value = lit.value
        elif t == "float":
            ok = lit.kind in ("int", "float")
            value = float(lit.value) if ok else None
        elif t == "string":
            ok = lit.kind == "string"
            value = lit.value
        elif t == "bool":
            ok = lit.kind == "bool"
            value = lit.value
        elif t == "time":
            if lit.kind == "int":
                value = lit.value
            elif lit.kind == "string":
                value = parse_time_ms(lit.value)
                if value is None:
                    self.error("E0403", lit.span, f"default {lit.text} is not an ISO-8601 time",
                               "write e.g. '2021-04-12T22:43:46Z' or epoch milliseconds")
                    value = 0
            else:
                ok = False
        if not ok:
            self.error("E0403", lit.span, f"default {lit.text} ({lit.kind}) does not fit input type {t}",
                       f"give {_a(t)} literal after `?`")
        f.input = InputSpec(d.path, optional=True, default=value, has_default=True)
        return t

    # ---------------------------------------------------------- expressions
    def expr(self, node: n.ExprNode, event: str, context: str = "") -> Expr:
        """Type an expression in the scope of ``event``; returns the typed IR.

        Args:
            node: expression node.
            event: the event whose features names refer to.
            context: appended to unknown-feature messages (e.g. which writer).
        """
        if isinstance(node, n.Literal):
            if _reported_by_parser(node):
                return Expr("lit", ERROR, value=None)
            return Expr("lit", node.kind if node.kind != "null" else NULL, value=node.value)
        if isinstance(node, n.Name):
            feats = self.events[event].features
            if node.name not in feats:
                hint = _suggest(node.name, feats)
                self.error("E0301", node.span, f"unknown feature '{node.name}' in event '{event}'{context}", hint)
                return Expr("ref", ERROR, name=node.name)
            return Expr("ref", self.type_of(event, node.name), name=node.name)
        if isinstance(node, n.Unary):
            a = self.expr(node.operand, event, context)
            t = unary_result(node.op, a.type)
            if t is None:
                want = {"neg": "a number or duration", "bitnot": "an int", "not": "a bool"}[node.op]
                self.error("E0401", node.span, f"`{_OP_SYMBOL[node.op]}` needs {want}, got {a.type}")
                t = ERROR
            return Expr("op", t, op=node.op, args=(a,))
        if isinstance(node, n.IsNull):
            a = self.expr(node.operand, event, context)
            return Expr("op", "bool", op="is_not_null" if node.negated else "is_null", args=(a,))
        if isinstance(node, n.Binary):
            return self._binary(node, event, context)
        if isinstance(node, n.ListLit):
            for item in node.items:
                self.expr(item, event, context)
            self.error("E0404", node.span, "a list can only appear on the right of `in` / `not in`")
            return Expr("list", ERROR)
        if isinstance(node, n.Access):
            return self._access(node, event, context)
        if isinstance(node, n.Call):
            return self._call(node, event, context)
        raise TypeError(f"unknown expression node {type(node).__name__}")

    def _access(self, node: n.Access, event: str, context: str) -> Expr:
        """``x.name`` on a struct, ``x[i]`` on an array (any int) or a tuple (constant) (SPEC §2.3)."""
        obj = self.expr(node.obj, event, context)
        kind, param = parse_type(obj.type) if obj.type not in (NULL, ERROR) else ("scalar", obj.type)
        if node.field is not None:
            name = Expr("lit", "string", value=node.field)
            if obj.type in (NULL, ERROR):
                return Expr("op", obj.type, op="field", args=(obj, name))
            if kind != "struct":
                self.error("E0401", node.span, f"`.{node.field}` needs a struct, got {obj.type}",
                           "`.name` takes a field of a multi-value Latest/First result (or of an item "
                           "of a multi-value Sequence)")
                return Expr("op", ERROR, op="field", args=(obj, name))
            fields = dict(param)
            if node.field not in fields:
                listed = ", ".join(fields)
                near = _suggest(node.field, fields)
                self.error("E0407", node.span, f"{obj.type} has no field '{node.field}'",
                           (f"{near} " if near else "") + f"its fields are: {listed}")
                return Expr("op", ERROR, op="field", args=(obj, name))
            return Expr("op", fields[node.field], op="field", args=(obj, name))
        idx = self.expr(node.index, event, context)
        if idx.type not in ("int", NULL, ERROR):
            self.error("E0401", node.index.span, f"an index must be an int, got {idx.type}",
                       "items are numbered 0, 1, ... from the start and -1, -2, ... from the end")
            return Expr("op", ERROR, op="index", args=(obj, idx))
        if obj.type in (NULL, ERROR) or idx.type == ERROR:
            t = ERROR if ERROR in (obj.type, idx.type) else NULL
            return Expr("op", t, op="index", args=(obj, idx))
        if kind == "array":
            return Expr("op", param, op="index", args=(obj, idx))
        if kind != "tuple":
            self.error("E0401", node.span, f"`[...]` needs an array or a tuple, got {obj.type}",
                       "`[i]` takes an item of a Sequence/Set result or a component of a tuple")
            return Expr("op", ERROR, op="index", args=(obj, idx))
        k: Any = None
        if not _has_names(node.index):
            try:
                k = _fold(idx)
            except _NotConst:
                k = None
        size = len(param)
        if not isinstance(k, int) or isinstance(k, bool):
            self.error("E0405", node.index.span, f"{_a(obj.type)} index must be an integer constant",
                       f"tuple components have different types; write a constant 0 to {size - 1}")
            return Expr("op", ERROR, op="index", args=(obj, idx))
        if not -size <= k < size:
            self.error("E0405", node.index.span, f"index {k} is out of range for {obj.type}",
                       f"use 0 to {size - 1} (or -{size} to -1 from the end)")
            return Expr("op", ERROR, op="index", args=(obj, idx))
        k %= size
        return Expr("op", param[k], op="index", args=(obj, Expr("lit", "int", value=k)))

    def _binary(self, node: n.Binary, event: str, context: str) -> Expr:
        left = self.expr(node.left, event, context)
        if node.op in ("in", "not_in"):
            if not isinstance(node.right, n.ListLit):
                self.expr(node.right, event, context)
                self.error("E0404", node.right.span, f"`{_OP_SYMBOL[node.op]}` needs a literal list",
                           "write `x in ('a', 'b')` or `x in [1, 2]`")
                return Expr("op", ERROR, op=node.op, args=(left,))
            items = tuple(self.expr(i, event, context) for i in node.right.items)
            elem = unify_all([i.type for i in items])
            if elem is None:
                self.error("E0401", node.right.span, "list items have different types: "
                           + ", ".join(sorted({i.type for i in items})))
                return Expr("op", ERROR, op=node.op, args=(left,))
            t = "bool"
            if unify(left.type, elem) is None or (elem not in (NULL, ERROR) and elem not in KEY_TYPES):
                self.error("E0401", node.span, f"cannot look for {left.type} in a list of {elem}")
                t = ERROR
            if elem == "float":
                items = tuple(self._to_float(i) for i in items)
            lst = Expr("list", f"array<{elem}>", args=items)
            return Expr("op", t, op=node.op, args=(left, lst))
        right = self.expr(node.right, event, context)
        t = binary_result(node.op, left.type, right.type)
        if t is None:
            hint = None
            types = {left.type, right.type}
            if node.op == "add" and "string" in types:
                hint = "convert the other side with String(x) to concatenate"
            elif node.op in ("add", "sub") and "time" in types:
                hint = "add or subtract a duration, e.g. `t - 5 minutes`"
            elif node.op in ("and", "or", "not"):
                hint = "compare to get a bool, e.g. `x > 0`"
            self.error("E0401", node.span,
                       f"`{_OP_SYMBOL[node.op]}` cannot combine {left.type} and {right.type}", hint)
            t = ERROR
        if node.op == "match" and t != ERROR:
            if right.kind != "lit":
                self.error("E0406", node.right.span, "the pattern of `~=` must be a string literal",
                           "patterns are compiled once per plan; write e.g. `s ~= '^[a-z]+$'`")
            elif isinstance(right.value, str):
                try:
                    re.compile(right.value)
                except re.error as e:
                    self.error("E0406", node.right.span, f"invalid regular expression: {e}")
        return Expr("op", t, op=node.op, args=(left, right))

    @staticmethod
    def _to_float(e: Expr) -> Expr:
        if e.type != "int":
            return e
        if e.kind == "lit":
            return Expr("lit", "float", value=float(e.value))
        return Expr("call", "float", op="Float", args=(e,))

    def _call(self, node: n.Call, event: str, context: str) -> Expr:
        canon = canonical_function(node.name)
        if canon is None:
            for a in node.args:
                self.expr(a, event, context)
            hint = _suggest(node.name, all_function_names())
            self.error("E0303", node.name_span, f"unknown function '{node.name}'", hint)
            return Expr("call", ERROR, op=node.name)
        if canon in AGGREGATES:
            self._aggregate_in_clause(node, canon, self._clause or "clause")
            return Expr("call", ERROR, op=canon)
        fn = SCALAR_FUNCTIONS[canon]
        if node.scope is not None or node.clauses:
            sp = node.clauses[0].span if node.clauses else node.name_span
            self.error("E0219", sp, f"{canon} is not an aggregate; it takes no scope or clauses",
                       f"it is called as {signature(canon)}")
        args = [self.expr(a, event, context) for a in node.args]
        if not (fn.min_args <= len(args) <= (fn.max_args if fn.max_args is not None else len(args))):
            s = "" if fn.arity_text() == "1" else "s"
            self.error("E0402", node.span,
                       f"{canon} takes {fn.arity_text()} argument{s}, got {len(args)}",
                       f"it is called as {signature(canon)}")
            return Expr("call", ERROR, op=canon, args=tuple(args))
        bad = False
        for i, a in enumerate(args):
            if a.type in (NULL, ERROR):
                bad = bad or a.type == ERROR
                continue
            ok = fn.accepts(i)
            if a.type not in ok:
                want = " or ".join(sorted(ok))
                self.error("E0401", node.args[i].span,
                           f"{canon} expects {want} for argument {i + 1}, got {a.type}",
                           f"it is called as {signature(canon)}")
                bad = True
        if bad:
            return Expr("call", ERROR, op=canon, args=tuple(args))
        t = fn.result([a.type for a in args])
        if t is None:
            tys = ", ".join(a.type for a in (args[1:] if canon == "If" else args))
            self.error("E0401", node.span, f"{canon} arguments have incompatible types: {tys}")
            return Expr("call", ERROR, op=canon, args=tuple(args))
        if fn.promote and t == "float":
            args = [a if (canon == "If" and i == 0) else self._to_float(a) for i, a in enumerate(args)]
        return Expr("call", t, op=canon, args=tuple(args))

    # ----------------------------------------------------------- aggregates
    _CLAUSE_HINTS = {
        "where": "`where` is applied when the event is written; define the aggregate as a feature of the "
                 "writer event, e.g. `n := {f}(...)`, and write `where n > 0`",
        "by": "a `by` key is a feature name; define the key as a feature, e.g. `k := {f}(...)`, "
              "and write `by k`",
        "after": "`after` takes the name of a time feature; define it, e.g. `t := {f}(...)`, "
                 "and write `after t`",
        "last": "a window is a constant duration, e.g. `last 7 days`",
        "limit": "a limit is an integer constant, e.g. `limit 10`",
        "value": "aggregate values are feature names; define it as a feature, e.g. `n := {f}(...)`, "
                 "and aggregate `n`",
    }

    def _aggregate_in_clause(self, node: n.Call, canon: str, clause: str) -> None:
        """Report E0223: aggregate ``canon`` (call ``node``) stands in ``clause``."""
        where = "an aggregate's value" if clause == "value" else f"`{clause}`"
        hint = self._CLAUSE_HINTS.get(clause, "define it as its own feature and refer to it by name")
        self.error("E0223", node.span, f"aggregate {canon} cannot be used in {where}",
                   hint.format(f=canon))

    @staticmethod
    def _first_aggregate(node: Any) -> n.Call | None:
        """The first aggregate call inside an expression node (source order), or ``None``."""
        return next((x for x in _walk(node) if isinstance(x, n.Call) and canonical_function(x.name) in AGGREGATES),
                    None)

    def _clause_aggregate(self, node: Any, clause: str) -> bool:
        """Report E0223 for the first aggregate inside ``node`` (a ``clause`` operand); whether one was found."""
        call = self._first_aggregate(node)
        if call is None:
            return False
        self._aggregate_in_clause(call, canonical_function(call.name), clause)
        return True

    def _clause_expr(self, node: n.ExprNode, event: str, clause: str, context: str = "") -> Expr:
        """Type an aggregate's clause operand; an aggregate call inside it is E0223."""
        saved, self._clause = self._clause, clause
        try:
            return self.expr(node, event, context)
        finally:
            self._clause = saved

    def _writers(self, f: FeatureInfo) -> tuple[list[str], bool]:
        """Existing scope events of aggregate ``f`` and whether it is common."""
        call: n.Call = f.decl.rhs
        if call.scope is None:
            return [f.event], True
        names = sorted({s.name for s in call.scope})
        writers = [s for s in names if s in self.events]
        return writers, names == [f.event]

    def aggregate_type(self, f: FeatureInfo) -> str:
        """Result type of an aggregate feature (SPEC §2.4 table); diagnostics come later."""
        call: n.Call = f.decl.rhs
        fn = AGGREGATES[canonical_function(call.name)]
        nargs = len(call.args)
        if nargs < fn.min_values or (fn.max_values is not None and nargs > fn.max_values):
            return ERROR
        if not fn.needs_value_types:
            return fn.result([], [])
        if not all(isinstance(a, n.Name) for a in call.args):
            return ERROR
        writers, _ = self._writers(f)
        names = [a.name for a in call.args]
        types = []
        for v in names:
            ts = {self.type_of(w, v) for w in writers if v in self.events[w].features}
            if len(ts) != 1:
                return ERROR
            t = ts.pop()
            if t not in fn.value_types:
                return ERROR
            types.append(t)
        return fn.result(names, types)

    def _clauses(self, call: n.Call) -> dict[str, n.Clause]:
        seen: dict[str, n.Clause] = {}
        max_idx, max_kind = -1, ""
        for c in call.clauses:
            idx = n.CLAUSE_ORDER.index(c.kind)
            if c.kind in seen:
                self.error("E0202", c.span, f"`{c.kind}` is given twice", "keep one of them")
                continue
            if idx < max_idx:
                self.error("E0201", c.span, f"`{c.kind}` must come before `{max_kind}`",
                           "clauses go in this order: by, where, after, last, limit, exclusive")
            else:
                max_idx, max_kind = idx, c.kind
            seen[c.kind] = c
        return seen

    def analyze_aggregate(self, f: FeatureInfo) -> None:
        """Step 3: check one aggregate feature; sets ``f.agg`` (SPEC §2.4)."""
        call: n.Call = f.decl.rhs
        canon = canonical_function(call.name)
        fn = AGGREGATES[canon]
        R = f.event
        feats_r = self.events[R].features
        clauses = self._clauses(call)

        # scope
        if call.scope is not None:
            for s in call.scope:
                if s.name not in self.events:
                    self.error("E0302", s.span, f"unknown event '{s.name}'",
                               _suggest(s.name, self.events) or "scope names are event types of the topology")
        writers, common = self._writers(f)

        # values
        nargs = len(call.args)
        if nargs < fn.min_values or (fn.max_values is not None and nargs > fn.max_values):
            self.error("E0210", call.span, f"{canon} takes {fn.arity_text()} value"
                       f"{'' if fn.max_values == 1 else 's'}, got {nargs}",
                       self._arity_hint(canon))
        values: list[str] = []
        value_types: list[str] = []
        for a in call.args:
            if not isinstance(a, n.Name):
                if self._clause_aggregate(a, "value"):
                    continue
                self._clause_expr(a, R, "value")
                self.error("E0211", a.span, "aggregate values must be feature names",
                           "define the expression as a feature, e.g. `v := <expression>`, and aggregate `v`")
                continue
            values.append(a.name)
            types: dict[str, str] = {}
            for w in writers:
                if a.name not in self.events[w].features:
                    if common:
                        self.error("E0301", a.span, f"unknown feature '{a.name}' in event '{w}'",
                                   _suggest(a.name, self.events[w].features))
                    else:
                        self.error("E0212", a.span, f"value '{a.name}' is not a feature of scope event '{w}'",
                                   f"every scope event must define '{a.name}'")
                else:
                    types[w] = self.type_of(w, a.name)
            concrete = {t for t in types.values() if t != ERROR}
            vt = ERROR
            if len(concrete) > 1:
                detail = ", ".join(f"{w}: {t}" for w, t in sorted(types.items()))
                self.error("E0220", a.span, f"value '{a.name}' has different types in the scope events ({detail})",
                           "make the types agree, e.g. with a Float(...) feature")
            elif concrete:
                vt = concrete.pop()
                if vt not in fn.value_types:
                    want = " or ".join(sorted(fn.value_types))
                    self.error("E0216", a.span, f"{canon} does not take {_a(vt)} value ('{a.name}')",
                               f"{canon} values must be {want}")
                    vt = ERROR
            value_types.append(vt)

        # keys
        read_keys: list[str] = []
        write_keys: list[str] = []
        key_types: list[str] = []
        by = clauses.get("by")
        for k in by.keys if isinstance(by, n.ByClause) else ():
            if not isinstance(k.read, n.Name):
                if self._clause_aggregate(k.read, "by"):
                    continue
                self._clause_expr(k.read, R, "by")
                self.error("E0214", k.read.span, "a `by` key must be a feature name",
                           "define the key as a feature, e.g. `k := <expression>`, and write `by k`")
                continue
            rk = k.read.name
            wk = k.write.name if k.write is not None else rk
            wspan = k.write.span if k.write is not None else k.read.span
            if k.write is not None:
                self._check_name(wk, wspan, "feature")
            rt = ERROR
            if rk not in feats_r:
                self.error("E0301", k.read.span, f"unknown feature '{rk}' in event '{R}' (read key)",
                           _suggest(rk, feats_r))
            else:
                rt = self.type_of(R, rk)
                if rt not in KEY_TYPES and rt != ERROR:
                    self.error("E0221", k.read.span, f"key '{rk}' has type {rt}",
                               "keys are bool, int, float, string, time or duration")
                    rt = ERROR
            for w in writers:
                wf = self.events[w].features
                if w == R and wk == rk:
                    continue  # the read key itself, checked above
                if wk not in wf:
                    if k.write is None and not common:
                        hint = f"name the writer's key feature: `by {rk} as <feature of {w}>`"
                    else:
                        hint = _suggest(wk, wf) or _listing(f"features of '{w}'", wf)
                    self.error("E0213", wspan, f"write key '{wk}' is not a feature of writer event '{w}'", hint)
                    continue
                wt = self.type_of(w, wk)
                if ERROR not in (rt, wt) and wt != rt:
                    self.error("E0215", wspan,
                               f"read key '{rk}' is {rt} in event '{R}' but write key '{wk}' is {wt} "
                               f"in writer event '{w}'",
                               "keys must have the same type on both sides; convert one with a scalar feature")
            read_keys.append(rk)
            write_keys.append(wk)
            key_types.append(rt)

        # where
        where: dict[str, Expr | None] = {w: None for w in writers}
        wc = clauses.get("where")
        if isinstance(wc, n.WhereClause):
            for w in writers:
                ctx = "" if w == R else f" (where clause, writer event '{w}')"
                e = self._clause_expr(wc.cond, w, "where", ctx)
                if e.type not in ("bool", NULL, ERROR):
                    self.error("E0217", wc.cond.span, f"`where` needs a bool condition, got {e.type}",
                               "compare to get a bool, e.g. `where x > 0`")
                where[w] = e

        # after
        after: str | None = None
        ac = clauses.get("after")
        if isinstance(ac, n.AfterClause):
            if fn.approximate:
                self.error("E0204", ac.span, f"`after` is not allowed on {canon}",
                           "Decayed* and HyperLogLog keep no per-event history to cut at a time")
            if self._clause_aggregate(ac.expr, "after"):
                pass
            elif not isinstance(ac.expr, n.Name):
                self.error("E0203", ac.expr.span, "`after` takes the name of a time feature, not an expression",
                           "define it as a feature, e.g. `t := <expression>`, and write `after t`")
            elif ac.expr.name not in feats_r:
                self.error("E0203", ac.expr.span,
                           f"`after` names '{ac.expr.name}', which is not a feature of event '{R}'",
                           _suggest(ac.expr.name, feats_r) or "after takes a time feature of the reading event")
            else:
                t = self.type_of(R, ac.expr.name)
                if t not in ("time", ERROR):
                    self.error("E0203", ac.expr.span, f"`after` needs a time feature; '{ac.expr.name}' is {t}",
                               "after takes the name of a `time` feature of the reading event")
                else:
                    after = ac.expr.name

        # last
        window_s = DEFAULT_WINDOW_S
        lc = clauses.get("last")
        if isinstance(lc, n.LastClause) and not self._clause_aggregate(lc.expr, "last"):
            window_s = self._window(lc, R)

        # limit
        limit = fn.default_limit
        mc = clauses.get("limit")
        if isinstance(mc, n.LimitClause):
            if not self._clause_aggregate(mc.expr, "limit"):
                limit = self._limit(mc, R, limit)
            if fn.approximate:
                self.error("E0222", mc.span, f"`limit` is not allowed on {canon}",
                           "Decayed* and HyperLogLog keep O(1) state, not the latest n writes")

        exclusive = "exclusive" in clauses
        if exclusive and not common:
            self.error("E0209", clauses["exclusive"].span, "`exclusive` is only for common aggregates",
                       "a cross-event aggregate never counts the reading event itself; drop `exclusive`")

        f.agg = AggInfo(
            function=canon, scopes=tuple(writers), common=common, read_keys=tuple(read_keys),
            write_keys=tuple(write_keys), values=tuple(values), where=where, window_s=window_s, limit=limit,
            exclusive=exclusive, after=after, value_types=tuple(value_types), key_types=tuple(key_types),
        )

    @staticmethod
    def _arity_hint(canon: str) -> str:
        examples = {
            "Count": "Count() or Count(x by k)",
            "Sum": "Sum(amount by user)", "Average": "Average(amount by user)",
            "Min": "Min(x by k)", "Max": "Max(x by k)",
            "LatestTime": "LatestTime(by k)", "FirstTime": "FirstTime(by k)",
            "DecayedCount": "DecayedCount(by k last 1 day)",
            "DecayedSum": "DecayedSum(x by k last 1 day)", "DecayedAverage": "DecayedAverage(x by k last 1 day)",
        }
        return "e.g. " + examples.get(canon, f"{canon}(a, b by k)")

    def _const(self, node: n.ExprNode, event: str) -> tuple[Expr | None, Any]:
        """Type and fold a constant.

        Returns:
            ``(expr, value)``; ``(None, None)`` if it refers to features or
            calls functions; ``(expr, _FoldError)`` if it is constant but
            cannot be evaluated (division by zero, overflow).
        """
        if _has_names(node):
            return None, None
        e = self.expr(node, event)
        if e.type == ERROR:
            return e, None
        try:
            return e, _fold(e)
        except _FoldError as err:
            return e, err
        except _NotConst:
            return None, None

    def _window(self, c: n.LastClause, event: str) -> int:
        e, v = self._const(c.expr, event)
        if isinstance(v, _FoldError):
            self.error("E0206", c.expr.span, f"the window cannot be computed: {v.reason}", _WINDOW_HINT)
            return DEFAULT_WINDOW_S
        if e is None:
            self.error("E0205", c.expr.span, "`last` needs a constant duration",
                       "windows cannot depend on features; write e.g. `last 7 days`")
            return DEFAULT_WINDOW_S
        if e.type == ERROR:
            return DEFAULT_WINDOW_S
        if e.type != "duration":
            self.error("E0205", c.expr.span, f"`last` needs a duration, got {e.type}",
                       "add a unit, e.g. `last 7 days`, `last 90 minutes`, `last PT1H`")
            return DEFAULT_WINDOW_S
        if v is not None and not math.isfinite(v):
            self.error("E0206", c.expr.span, "the window cannot be computed: the value is too large",
                       _WINDOW_HINT)
            return DEFAULT_WINDOW_S
        if v is None or v < 1 or v != int(v):
            shown = "null" if v is None else f"{v:g} seconds"
            self.error("E0206", c.expr.span, f"window must be whole seconds and at least 1 second, got {shown}",
                       _WINDOW_HINT)
            return DEFAULT_WINDOW_S
        if v > MAX_WINDOW_S:
            self.error("E0206", c.expr.span, f"window of {int(v)} seconds is longer than 10,000 years",
                       f"the longest window is {MAX_WINDOW_S} seconds ({MAX_WINDOW_S // 86400} days); "
                       "event times only span the years 0000-9999")
            return DEFAULT_WINDOW_S
        return int(v)

    def _limit(self, c: n.LimitClause, event: str, default: int | None) -> int | None:
        e, v = self._const(c.expr, event)
        if isinstance(v, _FoldError):
            self.error("E0207", c.expr.span, f"the limit cannot be computed: {v.reason}",
                       "write e.g. `limit 10`")
            return default
        if e is None:
            self.error("E0207", c.expr.span, "`limit` needs an integer constant",
                       "write e.g. `limit 10`")
            return default
        if e.type == ERROR:
            return default
        if e.type != "int" or v is None:
            self.error("E0207", c.expr.span, f"`limit` needs an integer constant, got {e.type}",
                       "write e.g. `limit 10`")
            return default
        if not 1 <= v <= MAX_LIMIT:
            self.error("E0208", c.expr.span, f"limit {v} is out of range", f"limit must be 1 to {MAX_LIMIT}")
            return default
        return int(v)

    # ----------------------------------------------------------------- order
    def deps_of(self, f: FeatureInfo) -> tuple[str, ...]:
        """Same-event features ``f`` needs (SPEC §2.1; aggregates per plan.Feature.deps)."""
        feats = self.events[f.event].features
        out: set[str] = set()
        if f.kind == "scalar" and f.expr is not None:
            out = f.expr.refs()
        elif f.kind == "aggregate" and f.agg is not None:
            a = f.agg
            out = set(a.read_keys)
            if a.after:
                out.add(a.after)
            if f.event in a.scopes:
                out |= set(a.write_keys) | set(a.values)
                wh = a.where.get(f.event)
                if wh is not None:
                    out |= wh.refs()
        return tuple(sorted(d for d in out if d in feats))

    def order(self, ev: EventInfo) -> None:
        """Step 4: deps, cycles (E0306) and a stable topological order of ``ev``'s features."""
        feats = ev.features
        for f in feats.values():
            f.deps = self.deps_of(f)
        for cycle in _cycles(feats):
            first = feats[cycle[0]]
            path = " -> ".join(cycle + [cycle[0]])
            self.error("E0306", first.name_span, f"dependency cycle in event '{ev.name}': {path}",
                       "a feature cannot depend on itself; an aggregate that its own event writes "
                       "also needs the features its write uses")
        # ready features in declaration order; cyclic ones (already reported) last
        ev.order = stable_topo({name: list(f.deps) for name, f in feats.items()})


def stable_topo(graph: dict[Any, list[Any]]) -> list[Any]:
    """Order the keys of ``graph`` (node -> nodes it needs) so needs come first.

    Among ready nodes the one listed first in ``graph`` goes first; nodes on
    a cycle (and those needing them) follow at the end in listing order.
    Iterative, so long dependency chains do not hit the recursion limit.

    >>> stable_topo({"c": ["b"], "a": [], "b": ["a"], "x": ["y"], "y": ["x"]})
    ['a', 'b', 'c', 'x', 'y']
    """
    rank = {k: i for i, k in enumerate(graph)}
    waiting = {k: {d for d in deps if d in rank and d != k} for k, deps in graph.items()}
    users: dict[Any, list[Any]] = {k: [] for k in graph}
    for k, deps in waiting.items():
        for d in deps:
            users[d].append(k)
    ready = [(rank[k], k) for k, deps in waiting.items() if not deps and k not in graph[k]]
    heapq.heapify(ready)
    out: list[Any] = []
    placed: set[Any] = set()
    while ready:
        _, k = heapq.heappop(ready)
        out.append(k)
        placed.add(k)
        for u in users[k]:
            waiting[u].discard(k)
            if not waiting[u] and u not in graph[u]:
                heapq.heappush(ready, (rank[u], u))
    out.extend(k for k in graph if k not in placed)
    return out


def _walk(node: Any) -> Iterator[Any]:
    """Every syntax node inside an expression node, itself first, in source order (iterative).

    A call yields its arguments and clauses, not its scope's event names.
    """
    stack = [node]
    while stack:
        x = stack.pop()
        if isinstance(x, (tuple, list)):
            stack.extend(reversed(x))
            continue
        yield x
        if isinstance(x, n.Call):
            stack.extend(reversed(x.args + x.clauses))
        elif hasattr(x, "__dataclass_fields__") and not isinstance(x, (n.Literal, Span)):
            stack.extend(getattr(x, f) for f in reversed(list(x.__dataclass_fields__)) if f != "span")


def _names_in(node: Any) -> list[str]:
    """Feature names referenced anywhere in an expression node (not scope names)."""
    return [x.name for x in _walk(node) if isinstance(x, n.Name)]


def _cycles(feats: dict[str, FeatureInfo]) -> list[list[str]]:
    """Each strongly connected component that is a cycle, as a path starting at its first-declared member."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    sccs: list[list[str]] = []
    counter = 0
    for root in feats:
        if root in index:
            continue
        # iterative Tarjan
        work = [(root, iter(feats[root].deps))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            v, it = work[-1]
            advanced = False
            for w in it:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(feats[w].deps)))
                    advanced = True
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            if advanced:
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                sccs.append(comp)
    out = []
    for comp in sccs:
        members = set(comp)
        start = min(comp, key=lambda x: feats[x].index)
        if len(comp) == 1 and start not in feats[start].deps:
            continue
        out.append(_path_in(start, members, feats))
    out.sort(key=lambda p: feats[p[0]].index)
    return out


def _path_in(start: str, members: set[str], feats: dict[str, FeatureInfo]) -> list[str]:
    """A shortest cycle path from ``start`` back to itself within ``members`` (BFS)."""
    if start in feats[start].deps:
        return [start]
    prev: dict[str, str] = {}
    queue = [start]
    seen = {start}
    while queue:
        nxt = []
        for v in queue:
            for w in feats[v].deps:
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(prev[path[-1]])
                    return list(reversed(path))
                if w in members and w not in seen:
                    seen.add(w)
                    prev[w] = v
                    nxt.append(w)
        queue = nxt
    return [start]

