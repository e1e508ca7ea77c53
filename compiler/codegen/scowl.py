"""The scalar expression IR printed back as Scowl text (the third target beside Python and Spark).

Used where a plan is shown to a person (``scowl plan``'s ``where`` clauses).
The text parses and checks back to the same :class:`~compiler.plan.Expr`
(up to the checker's own insertions, such as the ``Float(..)`` of an int
promoted to float, which it prints as calls): parentheses are added exactly
where the operator ladder of SPEC §2.3 needs them.

Literals: strings in single quotes (``\\'`` and ``\\\\`` escaped), floats
with a decimal point or exponent, durations as ``<n> seconds``, times as
``Time('<ISO-8601>')``, ``true``/``false``/``null``.

Source: SPEC §2.3 (literals, operators and precedence).
"""

from __future__ import annotations

import math

from compiler.codegen import UnsupportedError
from compiler.plan import EventPlan, Expr, Feature, Plan

__all__ = ["aggregate_to_scowl", "last_clause", "to_scowl"]

#: Binary operators: symbol and level (1 binds tightest; SPEC §2.3 ladder).
_BINARY = {
    "mul": ("*", 3), "div": ("/", 3), "floordiv": ("//", 3), "mod": ("%", 3),
    "add": ("+", 4), "sub": ("-", 4),
    "shl": ("<<", 5), "shr": (">>", 5),
    "bitand": ("&", 6), "bitxor": ("^", 7), "bitor": ("|", 8),
    "eq": ("=", 9), "ne": ("!=", 9), "match": ("~=", 9), "lt": ("<", 9), "gt": (">", 9),
    "le": ("<=", 9), "ge": (">=", 9),
    "and": ("and", 11), "or": ("or", 12),
}
_POSTFIX, _UNARY, _COMPARE, _NOT = 1, 2, 9, 10


def to_scowl(e: Expr) -> str:
    """Return Scowl source text for expression ``e``.

    Args:
        e: a typed expression of the plan (feature references by name).

    Returns:
        One line of Scowl, e.g. ``"amount > 50 and Lower(s) in ('a', 'b')"``.

    Raises:
        UnsupportedError: a node kind or operator the language has no text for
            (a compiler bug; the checker emits none).

    >>> from compiler.plan import Expr
    >>> x = Expr("ref", "int", name="x")
    >>> to_scowl(Expr("op", "int", op="mul", args=(Expr("op", "int", op="add", args=(x, Expr("lit", "int", value=1))), x)))
    '(x + 1) * x'
    """
    return _text(e)[0]


def _text(e: Expr) -> tuple[str, int]:
    """``(text, level)``: the text of ``e`` and the level of its outermost operator (0: atom)."""
    if e.kind == "lit":
        return _literal(e), 0
    if e.kind == "ref":
        return str(e.name), 0
    if e.kind == "call":
        return f"{e.op}({', '.join(_text(a)[0] for a in e.args)})", 0
    if e.kind == "list":
        return "(" + ", ".join(_text(a)[0] for a in e.args) + ("," if len(e.args) == 1 else "") + ")", 0
    if e.kind != "op":
        raise UnsupportedError(f"no Scowl text for a {e.kind!r} node", e)
    op, args = e.op, e.args
    if op == "field":
        return f"{_wrap(args[0], _POSTFIX)}.{args[1].value}", _POSTFIX
    if op == "index":
        return f"{_wrap(args[0], _POSTFIX)}[{_text(args[1])[0]}]", _POSTFIX
    if op in ("neg", "bitnot"):
        return ("-" if op == "neg" else "~") + _wrap(args[0], _UNARY), _UNARY
    if op == "not":
        return "not " + _wrap(args[0], _NOT), _NOT
    if op in ("is_null", "is_not_null"):
        return f"{_wrap(args[0], _COMPARE - 1)} is {'not ' if op == 'is_not_null' else ''}null", _COMPARE
    if op in ("in", "not_in"):
        word = "in" if op == "in" else "not in"
        return f"{_wrap(args[0], _COMPARE - 1)} {word} {_text(args[1])[0]}", _COMPARE
    if op not in _BINARY:
        raise UnsupportedError(f"no Scowl text for operator {op!r}", e)
    symbol, level = _BINARY[op]
    # left-associative: the left operand may sit at the same level, the right one must bind tighter;
    # comparisons do not chain, so both sides of one bind tighter
    left_max = level - 1 if level == _COMPARE else level
    return f"{_wrap(args[0], left_max)} {symbol} {_wrap(args[1], level - 1)}", level


def _wrap(e: Expr, max_level: int) -> str:
    """The text of ``e``, in parentheses if its operator binds looser than ``max_level`` allows."""
    text, level = _text(e)
    return f"({text})" if level > max_level else text


def _literal(e: Expr) -> str:
    v = e.value
    if v is None:
        return "null"
    if e.type == "bool" or isinstance(v, bool):
        return "true" if v else "false"
    if e.type == "string":
        return "'" + str(v).replace("\\", "\\\\").replace("'", "\\'").replace("\n", "\\n") + "'"
    if e.type == "duration":
        n = float(v)
        return f"{int(n) if n.is_integer() else repr(n)} seconds"
    if e.type == "time":
        from compiler.typesystem import format_time

        return f"Time('{format_time(int(v))}')"
    if e.type == "float":
        f = float(v)
        if not math.isfinite(f):
            raise UnsupportedError(f"no Scowl literal for {f}", e)
        text = repr(f)
        return text if any(c in text for c in ".eE") else text + ".0"
    return str(v)


def last_clause(window_s: int) -> str:
    """Return the ``last`` clause of a window in its largest whole unit.

    Args:
        window_s: the window ``W`` in seconds (``>= 1``).

    >>> last_clause(3600), last_clause(30 * 86400), last_clause(90)
    ('last 1 hour', 'last 30 days', 'last 90 seconds')
    """
    for unit, size in (("day", 86_400), ("hour", 3_600), ("minute", 60)):
        if window_s % size == 0:
            n = window_s // size
            return f"last {n} {unit}{'s' if n != 1 else ''}"
    return f"last {window_s} second{'s' if window_s != 1 else ''}"


def aggregate_to_scowl(plan: Plan, event: EventPlan, feature: Feature, with_last: bool = False) -> str:
    """Return an aggregate feature's definition in the language's syntax (SPEC §2.4), rebuilt from the plan.

    ``Function<scopes>(values by key as write_key, … where … after t [last W] limit n exclusive)``:
    the scope only for a cross-event aggregate; ``as`` where the writers'
    key differs from the reading event's (several writers with different
    keys: ``as a|b``); a filter as Scowl text (:func:`to_scowl`), or
    ``where ...`` when the writers filter differently.

    Args:
        plan: the plan (for the state's writes).
        event: the reading event.
        feature: an aggregate feature of ``event``.
        with_last: include the ``last`` clause (:func:`last_clause`).

    Returns:
        E.g. ``"Latest<weather_obs>(visib by origin as airport)"``.

    Raises:
        ValueError: ``feature`` is not an aggregate.
    """
    a = feature.aggregate
    if a is None:
        raise ValueError(f"{feature.name} is not an aggregate")
    state = plan.states.get(a.definition_hash)
    writes = list(state.writes.values()) if state is not None else []
    scope = "" if tuple(a.scopes) == (event.name,) else f"<{', '.join(a.scopes)}>"
    clauses: list[str] = []
    if a.value_names:
        clauses.append(", ".join(a.value_names))
    if a.read_keys:
        keys = []
        for i, k in enumerate(a.read_keys):
            written = sorted({w.keys[i] for w in writes if i < len(w.keys)})
            keys.append(k if written in ([], [k]) else f"{k} as {'|'.join(written)}")
        clauses.append("by " + ", ".join(keys))
    filters = {w.where for w in writes if w.where is not None}
    if filters:
        clauses.append("where " + (_filter_text(filters.pop()) if len(filters) == 1 else "..."))
    if a.after:
        clauses.append(f"after {a.after}")
    if with_last:
        clauses.append(last_clause(a.window_s))
    if a.limit is not None:
        clauses.append(f"limit {a.limit}")
    if a.exclusive:
        clauses.append("exclusive")
    return f"{a.function}{scope}({' '.join(clauses)})"


def _filter_text(where: Expr) -> str:
    """A ``where`` filter as Scowl text (``...`` if it has no text, which the checker never produces)."""
    try:
        return to_scowl(where)
    except UnsupportedError:
        return "..."
