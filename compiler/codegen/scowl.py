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
from compiler.plan import Expr

__all__ = ["to_scowl"]

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
