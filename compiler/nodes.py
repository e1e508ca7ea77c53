"""The Scowl syntax tree: frozen dataclasses, each with a :class:`Span` (SPEC §2).

The parser (``compiler/parser.py``) builds these from the lark parse tree; the
checker (``compiler/check.py``) reads them. Nothing here knows about types.

Shapes
------
* :class:`SourceFile` -- ``statements`` in source order: :class:`EventDecl`,
  :class:`FeatureDecl`, or :class:`BrokenStatement` (a chunk that failed to
  parse; its feature name, when recognisable, is still declared so that other
  features referring to it do not produce follow-on errors).
* A feature's right-hand side is an :class:`InputDef` (``$.a as T``) or an
  expression node (:data:`ExprNode`).
* Expressions: :class:`Literal`, :class:`Name`, :class:`Unary`,
  :class:`Binary` (``op`` is a name from :data:`compiler.plan.OPERATORS`),
  :class:`IsNull`, :class:`ListLit`, :class:`Access` (``.`` / ``[]``),
  :class:`Call` (built-ins and aggregates alike, with optional scope and
  clauses).

Source: SPEC §2.1-§2.4.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal as TLiteral, Union

from compiler.plan import Span

__all__ = [
    "Span", "Literal", "Name", "Unary", "Binary", "IsNull", "ListLit", "Access",
    "Call", "ByKey", "ByClause", "WhereClause", "AfterClause", "LastClause",
    "LimitClause", "ExclusiveClause", "Clause", "ExprNode", "InputDef",
    "FeatureDecl", "EventDecl", "BrokenStatement", "Statement", "SourceFile",
]


# ------------------------------------------------------------------ expressions
@dataclass(frozen=True)
class Literal:
    """A constant.

    Attributes:
        kind: ``int``, ``float``, ``string``, ``bool``, ``null`` or ``duration``.
        value: Python value; durations in float seconds.
        text: the source text (for messages).
        span: source range.
    """

    kind: TLiteral["int", "float", "string", "bool", "null", "duration"]
    value: Any
    text: str
    span: Span


@dataclass(frozen=True)
class Name:
    """A bare identifier: a feature reference (or, in a scope, an event name)."""

    name: str
    span: Span


@dataclass(frozen=True)
class Unary:
    """A prefix operator: ``op`` is ``neg``, ``bitnot`` or ``not``."""

    op: str
    operand: "ExprNode"
    span: Span


@dataclass(frozen=True)
class Binary:
    """A binary operator; ``op`` is a :data:`compiler.plan.OPERATORS` name
    (``add``, ``eq``, ``in``, ``not_in``, ``and`` ...)."""

    op: str
    left: "ExprNode"
    right: "ExprNode"
    span: Span


@dataclass(frozen=True)
class IsNull:
    """``operand is null`` (``negated=False``) or ``operand is not null``."""

    operand: "ExprNode"
    negated: bool
    span: Span


@dataclass(frozen=True)
class ListLit:
    """A list ``[a, b]`` or tuple ``(a, b)`` -- the right side of ``in``.

    Attributes:
        items: element expressions.
        bracket: ``"["`` or ``"("`` (as written).
    """

    items: tuple["ExprNode", ...]
    bracket: str
    span: Span


@dataclass(frozen=True)
class Access:
    """Postfix ``obj.field`` (``field`` set) or ``obj[index]`` (``index`` set).

    Parsed for completeness (SPEC §2.3 precedence); v1 plans cannot express
    it, so the checker reports ``E0405 unsupported-access``.
    """

    obj: "ExprNode"
    field: str | None
    index: "ExprNode | None"
    span: Span


@dataclass(frozen=True)
class ByKey:
    """One ``by`` item: ``read [as write]``.

    Attributes:
        read: expression given as the read key (must be a :class:`Name`).
        write: write-key name and its span, or ``None`` (same as ``read``).
    """

    read: "ExprNode"
    write: Name | None
    span: Span


@dataclass(frozen=True)
class ByClause:
    """``by k [as w], ...``."""

    keys: tuple[ByKey, ...]
    span: Span
    kind: str = "by"


@dataclass(frozen=True)
class WhereClause:
    """``where cond`` (evaluated over writer features)."""

    cond: "ExprNode"
    span: Span
    kind: str = "where"


@dataclass(frozen=True)
class AfterClause:
    """``after t`` (``t`` must be the name of a time feature of the reading event)."""

    expr: "ExprNode"
    span: Span
    kind: str = "after"


@dataclass(frozen=True)
class LastClause:
    """``last duration`` (a constant)."""

    expr: "ExprNode"
    span: Span
    kind: str = "last"


@dataclass(frozen=True)
class LimitClause:
    """``limit n`` (an integer constant)."""

    expr: "ExprNode"
    span: Span
    kind: str = "limit"


@dataclass(frozen=True)
class ExclusiveClause:
    """``exclusive``."""

    span: Span
    kind: str = "exclusive"


Clause = Union[ByClause, WhereClause, AfterClause, LastClause, LimitClause, ExclusiveClause]

#: Clause kinds in their required order (SPEC §2.4).
CLAUSE_ORDER: tuple[str, ...] = ("by", "where", "after", "last", "limit", "exclusive")


@dataclass(frozen=True)
class Call:
    """``Name(args ...)`` or ``Name<e1, e2>(args ... clauses)``.

    Attributes:
        name: function name as written.
        name_span: span of the name.
        scope: scope event names, or ``None`` when no ``<...>`` was written.
        args: positional arguments (aggregate values or built-in arguments).
        clauses: clauses in source order.
    """

    name: str
    name_span: Span
    scope: tuple[Name, ...] | None
    args: tuple["ExprNode", ...]
    clauses: tuple[Clause, ...]
    span: Span


ExprNode = Union[Literal, Name, Unary, Binary, IsNull, ListLit, Access, Call]


# ------------------------------------------------------------------- statements
@dataclass(frozen=True)
class InputDef:
    """``$.path as T``, ``as T?`` or ``as T ? literal`` (SPEC §2.2).

    Attributes:
        path: steps after ``$`` (``str`` keys, ``int`` indices).
        path_span: span of the ``$...`` path.
        type_name: ``T`` as written; type_span its span.
        optional: a ``?`` was written.
        default: the default :class:`Literal`, or ``None``.
    """

    path: tuple[str | int, ...]
    path_span: Span
    type_name: str
    type_span: Span
    optional: bool
    default: Literal | None
    span: Span


@dataclass(frozen=True)
class FeatureDecl:
    """``name := rhs``."""

    name: str
    name_span: Span
    rhs: "InputDef | ExprNode"
    span: Span


@dataclass(frozen=True)
class EventDecl:
    """``event NAME``: opens (or reopens) a section."""

    name: str
    name_span: Span
    span: Span


@dataclass(frozen=True)
class BrokenStatement:
    """A statement chunk that did not parse (a syntax error was reported).

    Attributes:
        feature: the feature name if the chunk starts with ``name :=``.
        event: the event name if it starts with ``event NAME``; ``""`` if it
            starts with ``event`` but the name is unreadable (the section's
            features are then skipped).
    """

    feature: str | None
    event: str | None
    span: Span


Statement = Union[EventDecl, FeatureDecl, BrokenStatement]


@dataclass(frozen=True)
class SourceFile:
    """One parsed ``.scowl`` file."""

    path: str
    statements: tuple[Statement, ...]
