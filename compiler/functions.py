"""Types, operator typing rules, built-in and aggregate function signatures (SPEC §2.3, §2.4).

One table for the checker and the code generators:

* Type names are strings (see :mod:`compiler.plan`): scalar ``bool int float
  string time duration null`` and, for aggregate results,
  ``struct{a:int,b:string}``, ``array<T>``, ``array<tuple{int,string}>``.
  The checker also uses ``error`` internally for an expression that already
  has a diagnostic; it never reaches a plan.
* :func:`unify` -- the common type of two types (``null`` fits anything,
  ``int`` promotes to ``float``).
* :func:`unary_result` / :func:`binary_result` -- result type of an operator
  (names from :data:`compiler.plan.OPERATORS`), or ``None`` for a type error.
* :data:`SCALAR_FUNCTIONS` -- built-ins by canonical name; :data:`ALIASES`
  maps other spellings (``Length`` -> ``Len``).
* :data:`AGGREGATES` -- aggregate functions with value arity, accepted value
  types, whether ``after`` is allowed, default ``limit`` and result type.

Run-time representations: time = int epoch milliseconds, duration = float
seconds. So ``time - time`` is ``(a - b) / 1000``, ``time + duration`` is
``a + round(d * 1000)``, and ``Days(d)`` is ``d / 86400``.

Source: SPEC §2.3 (operators, built-ins), §2.4 (aggregate table).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, NamedTuple, Sequence

__all__ = [
    "NUMERIC", "VALUE_TYPES", "KEY_TYPES", "INPUT_TYPES", "unify", "unify_all", "is_numeric",
    "unary_result", "binary_result", "ScalarFunction", "SCALAR_FUNCTIONS", "ALIASES",
    "canonical_function", "AggregateFunction", "AGGREGATES", "struct_type", "array_type", "tuple_type",
    "all_function_names", "Operators", "PRECEDENCE", "ScalarDoc", "SCALAR_DOCS", "signature", "result_text",
    "AggregateDoc", "AGGREGATE_DOCS", "TRIM_CHARACTERS",
]

ERROR = "error"
NULL = "null"
NUMERIC = frozenset({"int", "float"})
#: Types an input may declare (SPEC §2.2).
INPUT_TYPES = ("bool", "int", "float", "string", "time")
#: Types an aggregate value may have.
VALUE_TYPES = frozenset({"bool", "int", "float", "string", "time", "duration"})
#: Types an entity key component may have.
KEY_TYPES = frozenset({"bool", "int", "float", "string", "time", "duration"})
_COMPARABLE = frozenset({"int", "float", "string", "time", "duration"})
_ANY_SCALAR = frozenset({"bool", "int", "float", "string", "time", "duration"})


def is_numeric(t: str) -> bool:
    """``int`` or ``float``."""
    return t in NUMERIC


def unify(a: str, b: str) -> str | None:
    """Return the common type of ``a`` and ``b``, or ``None`` if they do not mix.

    ``null`` unifies with anything, ``int`` with ``float`` gives ``float``,
    ``error`` absorbs everything.

    >>> unify("int", "float"), unify("null", "string"), unify("string", "int")
    ('float', 'string', None)
    """
    if a == ERROR or b == ERROR:
        return ERROR
    if a == b:
        return a
    if a == NULL:
        return b
    if b == NULL:
        return a
    if a in NUMERIC and b in NUMERIC:
        return "float"
    return None


def unify_all(types: Sequence[str]) -> str | None:
    """:func:`unify` over a sequence (``null`` for an empty one)."""
    out = NULL
    for t in types:
        u = unify(out, t)
        if u is None:
            return None
        out = u
    return out


def unary_result(op: str, t: str) -> str | None:
    """Result type of a unary operator (``neg``, ``bitnot``, ``not``), ``None`` on a type error."""
    if t == ERROR:
        return ERROR
    if op == "neg":
        return t if t in ("int", "float", "duration", NULL) else None
    if op == "bitnot":
        return "int" if t in ("int", NULL) else None
    if op == "not":
        return "bool" if t in ("bool", NULL) else None
    if op in ("is_null", "is_not_null"):
        return "bool"
    return None


def _arith(op: str, a: str, b: str) -> str | None:
    """add/sub/mul/div/floordiv/mod with both operands non-null."""
    if a in NUMERIC and b in NUMERIC:
        if op == "div":
            return "float"
        return "int" if a == b == "int" else "float"
    if op == "add":
        if a == b == "string":
            return "string"
        if {a, b} == {"time", "duration"}:
            return "time"
        if a == b == "duration":
            return "duration"
    if op == "sub":
        if a == b == "time":
            return "duration"
        if a == "time" and b == "duration":
            return "time"
        if a == b == "duration":
            return "duration"
    if op == "mul" and {a, b} in ({"duration", "int"}, {"duration", "float"}):
        return "duration"
    if op == "div":
        if a == "duration" and b in NUMERIC:
            return "duration"
        if a == b == "duration":
            return "float"
    return None


def binary_result(op: str, a: str, b: str) -> str | None:
    """Result type of a binary operator, or ``None`` for a type error.

    Args:
        op: a name from :data:`compiler.plan.OPERATORS` (not ``in``/``not_in``,
            which the checker types against a list).
        a, b: operand types.

    >>> binary_result("sub", "time", "time"), binary_result("add", "string", "string")
    ('duration', 'string')
    >>> binary_result("div", "int", "int"), binary_result("floordiv", "int", "int")
    ('float', 'int')
    >>> binary_result("lt", "null", "int"), binary_result("add", "int", "string") is None
    ('bool', True)
    """
    if a == ERROR or b == ERROR:
        return ERROR
    if op in ("and", "or"):
        return "bool" if a in ("bool", NULL) and b in ("bool", NULL) else None
    if op in ("eq", "ne"):
        if a == NULL or b == NULL or unify(a, b) is not None and a in _ANY_SCALAR and b in _ANY_SCALAR:
            return "bool"
        return None
    if op in ("lt", "gt", "le", "ge"):
        if a == NULL and b == NULL:
            return "bool"
        if a == NULL or b == NULL:
            return "bool" if (b if a == NULL else a) in _COMPARABLE else None
        u = unify(a, b)
        return "bool" if u is not None and u in _COMPARABLE else None
    if op == "match":
        return "bool" if a in ("string", NULL) and b in ("string", NULL) else None
    if op in ("shl", "shr", "bitand", "bitor", "bitxor"):
        if a in ("int", NULL) and b in ("int", NULL):
            return "int"
        return None
    if op in ("add", "sub", "mul", "div", "floordiv", "mod"):
        if a == NULL and b == NULL:
            return NULL
        if a == NULL or b == NULL:
            other = b if a == NULL else a
            # the null operand takes whatever type makes the operation valid
            for guess in (other, "int", "float", "duration", "time", "string"):
                r = _arith(op, guess, other) if a == NULL else _arith(op, other, guess)
                if r is not None:
                    return r
            return None
        return _arith(op, a, b)
    return None


# ------------------------------------------------------------ scalar built-ins
@dataclass(frozen=True)
class ScalarFunction:
    """A scalar built-in.

    Attributes:
        name: canonical spelling (used as ``Expr.op`` of a ``call``).
        min_args, max_args: arity (``max_args=None``: variadic).
        params: accepted types per position; the last entry repeats for
            variadic functions. ``null`` (and ``error``) is always accepted.
        result: argument types -> result type, or ``None`` if they do not fit
            together (e.g. ``If(c, 1, 'a')``).
        promote: whether int arguments are converted to float when the result
            is float (``Maximum``, ``Minimum``, ``Coalesce``, ``If``).
        doc: one line, for docs.
    """

    name: str
    min_args: int
    max_args: int | None
    params: tuple[frozenset[str], ...]
    result: Callable[[Sequence[str]], str | None]
    doc: str
    promote: bool = False

    def accepts(self, position: int) -> frozenset[str]:
        """Types accepted at ``position`` (0-based)."""
        if not self.params:
            return frozenset()
        return self.params[min(position, len(self.params) - 1)]

    def arity_text(self) -> str:
        """Human text for the arity, e.g. ``1``, ``2 or more``."""
        if self.max_args is None:
            return f"{self.min_args} or more"
        if self.min_args == self.max_args:
            return str(self.min_args)
        return f"{self.min_args} to {self.max_args}"


def _const(t: str) -> Callable[[Sequence[str]], str | None]:
    return lambda _args: t


def _unified(args: Sequence[str]) -> str | None:
    return unify_all(args)


def _if_result(args: Sequence[str]) -> str | None:
    return unify_all(args[1:])


class _WithArrays(frozenset):
    """Accepted parameter types that also take every ``array<T>`` (shown as ``array`` in messages)."""

    def __contains__(self, type_name: object) -> bool:
        return (isinstance(type_name, str) and type_name.startswith("array<")) or super().__contains__(type_name)


#: What ``Trim`` takes off both ends of a text: JSON's whitespace (space, tab, carriage return, line feed),
#: the same in both engines (Python's ``str.strip()`` would also take Unicode spaces, Spark's ``trim`` only
#: the space).
TRIM_CHARACTERS = " \t\r\n"

_S = frozenset
SCALAR_FUNCTIONS: dict[str, ScalarFunction] = {
    f.name: f
    for f in (
        ScalarFunction("EventTime", 0, 0, (), _const("time"), "the event time of the current event"),
        ScalarFunction("Time", 1, 1, (_S({"string"}),), _const("time"),
                       "parse an ISO-8601 string; Time(null) is a typed null time"),
        ScalarFunction("ParseTime", 1, 1, (_S({"string"}),), _const("time"), "parse an ISO-8601 string"),
        ScalarFunction("FromUnixSeconds", 1, 1, (NUMERIC,), _const("time"), "time from epoch seconds"),
        ScalarFunction("Days", 1, 1, (_S({"duration"}),), _const("float"), "a duration in days"),
        ScalarFunction("Hours", 1, 1, (_S({"duration"}),), _const("float"), "a duration in hours"),
        ScalarFunction("Minutes", 1, 1, (_S({"duration"}),), _const("float"), "a duration in minutes"),
        ScalarFunction("Seconds", 1, 1, (_S({"duration"}),), _const("float"), "a duration in seconds"),
        ScalarFunction("Len", 1, 1, (_WithArrays({"string", "array"}),), _const("int"),
                       "length of a string in code points, or the number of items of an array"),
        ScalarFunction("Maximum", 1, None, (_COMPARABLE,), _unified, "the largest argument (null if any argument is null)",
                       promote=True),
        ScalarFunction("Minimum", 1, None, (_COMPARABLE,), _unified, "the smallest argument (null if any argument is null)",
                       promote=True),
        ScalarFunction("Lower", 1, 1, (_S({"string"}),), _const("string"), "lower-case"),
        ScalarFunction("Upper", 1, 1, (_S({"string"}),), _const("string"), "upper-case"),
        ScalarFunction("Contains", 2, 2, (_S({"string"}), _S({"string"})), _const("bool"),
                       "whether s contains sub"),
        ScalarFunction("StartsWith", 2, 2, (_S({"string"}), _S({"string"})), _const("bool"),
                       "whether s starts with p"),
        ScalarFunction("EndsWith", 2, 2, (_S({"string"}), _S({"string"})), _const("bool"),
                       "whether s ends with p"),
        ScalarFunction("Split", 2, 2, (_S({"string"}), _S({"string"})), _const("array<string>"),
                       "the parts of s between the occurrences of sep (a text, not a pattern), empty parts "
                       "kept; an empty sep splits s into its code points"),
        ScalarFunction("Trim", 1, 1, (_S({"string"}),), _const("string"),
                       "s without its leading and trailing spaces, tabs, carriage returns and line feeds"),
        ScalarFunction("Replace", 3, 3, (_S({"string"}), _S({"string"}), _S({"string"})), _const("string"),
                       "s with every occurrence of old, left to right, replaced by new (texts, not patterns; "
                       "an empty old replaces nothing)"),
        ScalarFunction("Coalesce", 1, None, (_ANY_SCALAR,), _unified, "the first non-null argument",
                       promote=True),
        ScalarFunction("If", 3, 3, (_S({"bool"}), _ANY_SCALAR, _ANY_SCALAR), _if_result,
                       "a if cond else b (null cond counts as false)", promote=True),
        ScalarFunction("Int", 1, 1, (_S({"bool", "int", "float", "string"}),), _const("int"),
                       "cast to int (floats truncate toward zero); Int(null) is a typed null"),
        ScalarFunction("Float", 1, 1, (_S({"bool", "int", "float", "string"}),), _const("float"),
                       "cast to float"),
        ScalarFunction("String", 1, 1, (_S({"bool", "int", "float", "string", "time"}),), _const("string"),
                       "cast to string (time as ISO-8601 with milliseconds)"),
        ScalarFunction("Bool", 1, 1, (_S({"bool", "int", "float", "string"}),), _const("bool"),
                       "cast to bool"),
    )
}

#: Other accepted spellings -> canonical name.
ALIASES: dict[str, str] = {"Length": "Len"}


def canonical_function(name: str) -> str | None:
    """Return the canonical built-in or aggregate name for ``name``, or ``None``.

    >>> canonical_function("Length"), canonical_function("Count"), canonical_function("Nope")
    ('Len', 'Count', None)
    """
    name = ALIASES.get(name, name)
    if name in SCALAR_FUNCTIONS or name in AGGREGATES:
        return name
    return None


# ------------------------------------------------------------------ aggregates
def struct_type(names: Sequence[str], types: Sequence[str]) -> str:
    """``struct{a:int,b:string}``."""
    return "struct{" + ",".join(f"{n}:{t}" for n, t in zip(names, types)) + "}"


def tuple_type(types: Sequence[str]) -> str:
    """``tuple{int,string}``."""
    return "tuple{" + ",".join(types) + "}"


def array_type(t: str) -> str:
    """``array<T>``."""
    return f"array<{t}>"


@dataclass(frozen=True)
class AggregateFunction:
    """An aggregate function (SPEC §2.4 table).

    Attributes:
        name: canonical name.
        min_values, max_values: value arity (``max_values=None``: 1 or more).
        value_types: accepted types of each value.
        approximate: ``after`` is not allowed (Decayed*, HyperLogLog).
        default_limit: ``limit`` when none is written.
        result: ``(value_names, value_types) -> result type``.
        needs_value_types: whether ``result`` looks at the value types.
        doc: result on an empty window, for docs.
    """

    name: str
    min_values: int
    max_values: int | None
    value_types: frozenset[str]
    approximate: bool
    default_limit: int | None
    result: Callable[[Sequence[str], Sequence[str]], str]
    needs_value_types: bool
    doc: str

    def arity_text(self) -> str:
        """``exactly 1``, ``no``, ``1 or more`` ..."""
        if self.max_values is None:
            return f"{self.min_values} or more" if self.min_values else "any number of"
        if self.max_values == 0:
            return "no"
        return f"exactly {self.min_values}"


def _one_or_struct(names: Sequence[str], types: Sequence[str]) -> str:
    return types[0] if len(types) == 1 else struct_type(names, types)


def _sequence(names: Sequence[str], types: Sequence[str]) -> str:
    return array_type(_one_or_struct(names, types))


def _set(names: Sequence[str], types: Sequence[str]) -> str:
    return array_type(types[0] if len(types) == 1 else tuple_type(types))


def _sum(_names: Sequence[str], types: Sequence[str]) -> str:
    return "int" if types and types[0] == "int" else "float"


def _agg(name, lo, hi, vtypes, approx, limit, result, needs, doc) -> AggregateFunction:
    return AggregateFunction(name, lo, hi, frozenset(vtypes), approx, limit, result, needs, doc)


_R_INT = lambda _n, _t: "int"  # noqa: E731
_R_FLOAT = lambda _n, _t: "float"  # noqa: E731
_R_TIME = lambda _n, _t: "time"  # noqa: E731
_R_FIRST = lambda _n, t: t[0]  # noqa: E731

AGGREGATES: dict[str, AggregateFunction] = {
    a.name: a
    for a in (
        _agg("Count", 0, None, VALUE_TYPES, False, None, _R_INT, False,
             "int (0): events, or events whose values are all non-null"),
        _agg("CountUnique", 1, None, VALUE_TYPES, False, None, _R_INT, False, "int, exact (0)"),
        _agg("Sum", 1, 1, NUMERIC, False, None, _sum, True, "int for int input, else float (0 / 0.0)"),
        _agg("Min", 1, 1, {"int", "float", "string", "time"}, False, None, _R_FIRST, True, "input type (null)"),
        _agg("Max", 1, 1, {"int", "float", "string", "time"}, False, None, _R_FIRST, True, "input type (null)"),
        _agg("Average", 1, 1, NUMERIC, False, None, _R_FLOAT, False, "float (null)"),
        _agg("Latest", 1, None, VALUE_TYPES, False, None, _one_or_struct, True, "value or struct (null)"),
        _agg("First", 1, None, VALUE_TYPES, False, None, _one_or_struct, True, "value or struct (null)"),
        _agg("LatestTime", 0, 0, VALUE_TYPES, False, None, _R_TIME, False, "time (null)"),
        _agg("FirstTime", 0, 0, VALUE_TYPES, False, None, _R_TIME, False, "time (null)"),
        _agg("Sequence", 1, None, VALUE_TYPES, False, 100, _sequence, True,
             "array of values or structs, oldest first ([])"),
        _agg("Set", 1, None, VALUE_TYPES, False, 100, _set, True,
             "array of distinct values or tuples, ascending ([])"),
        _agg("DecayedCount", 0, 0, VALUE_TYPES, True, None, _R_FLOAT, False, "float (0.0)"),
        _agg("DecayedSum", 1, 1, NUMERIC, True, None, _R_FLOAT, False, "float (0.0)"),
        _agg("DecayedAverage", 1, 1, NUMERIC, True, None, _R_FLOAT, False, "float (null)"),
        _agg("HyperLogLog", 1, None, VALUE_TYPES, True, None, _R_INT, False, "int, approximate (0)"),
    )
}


def all_function_names() -> list[str]:
    """Every callable name (built-ins, aliases, aggregates), for did-you-mean hints."""
    return sorted(set(SCALAR_FUNCTIONS) | set(ALIASES) | set(AGGREGATES))


# ------------------------------------------------------------ documentation
class Operators(NamedTuple):
    """One precedence level of the operator ladder (SPEC §2.3).

    Attributes:
        symbols: the operators as written, e.g. ``("*", "/", "//", "%")``.
        ops: their names in :data:`compiler.plan.OPERATORS` (same order;
            ``""`` for the postfix forms, which are not plain operators).
        grouping: ``left`` (``a - b - c`` is ``(a - b) - c``), ``prefix``,
            ``postfix`` or ``none`` (comparisons do not chain).
        meaning: one line, for docs.
    """

    symbols: tuple[str, ...]
    ops: tuple[str, ...]
    grouping: str
    meaning: str


#: The operator ladder, tightest first (SPEC §2.3; the rules of ``grammar.lark``).
#: ``tests/compiler/test_docs.py`` parses expressions to hold the grammar to it.
PRECEDENCE: tuple[Operators, ...] = (
    Operators(("x[i]", "x.name"), ("", ""), "postfix", "item of an array or tuple; field of a struct"),
    Operators(("-x", "~x"), ("neg", "bitnot"), "prefix", "negation; bitwise not"),
    Operators(("*", "/", "//", "%"), ("mul", "div", "floordiv", "mod"), "left",
              "multiply; divide (always float); floor divide; modulo"),
    Operators(("+", "-"), ("add", "sub"), "left", "add (also concatenates strings); subtract"),
    Operators(("<<", ">>"), ("shl", "shr"), "left", "bit shifts (int)"),
    Operators(("&",), ("bitand",), "left", "bitwise and (int)"),
    Operators(("^",), ("bitxor",), "left", "bitwise exclusive or (int)"),
    Operators(("|",), ("bitor",), "left", "bitwise or (int)"),
    Operators(("=", "!=", "~=", "<", ">", "<=", ">=", "in", "not in", "is null", "is not null"),
              ("eq", "ne", "match", "lt", "gt", "le", "ge", "in", "not_in", "is_null", "is_not_null"), "none",
              "equal (a single `=`); not equal; regular-expression search; order; membership in a literal "
              "list; null tests"),
    Operators(("not",), ("not",), "prefix", "logical not (three-valued)"),
    Operators(("and",), ("and",), "left", "logical and (three-valued)"),
    Operators(("or",), ("or",), "left", "logical or (three-valued)"),
)


class ScalarDoc(NamedTuple):
    """How a built-in is documented.

    Attributes:
        params: parameter names, one per position of
            :attr:`ScalarFunction.params` (for a variadic function the last
            one repeats).
        result: the result rule when it depends on the arguments; ``""``
            when the result type is fixed (docs then ask
            :attr:`ScalarFunction.result` for it).
    """

    params: tuple[str, ...]
    result: str = ""


_COMMON = "the common type of the arguments (int with float gives float)"

#: Parameter names and result rules of every :data:`SCALAR_FUNCTIONS` entry (for docs).
SCALAR_DOCS: dict[str, ScalarDoc] = {
    "EventTime": ScalarDoc(()),
    "Time": ScalarDoc(("s",)),
    "ParseTime": ScalarDoc(("s",)),
    "FromUnixSeconds": ScalarDoc(("n",)),
    "Days": ScalarDoc(("d",)),
    "Hours": ScalarDoc(("d",)),
    "Minutes": ScalarDoc(("d",)),
    "Seconds": ScalarDoc(("d",)),
    "Len": ScalarDoc(("x",)),
    "Maximum": ScalarDoc(("a",), _COMMON),
    "Minimum": ScalarDoc(("a",), _COMMON),
    "Lower": ScalarDoc(("s",)),
    "Upper": ScalarDoc(("s",)),
    "Contains": ScalarDoc(("s", "sub")),
    "StartsWith": ScalarDoc(("s", "p")),
    "EndsWith": ScalarDoc(("s", "p")),
    "Split": ScalarDoc(("s", "sep")),
    "Trim": ScalarDoc(("s",)),
    "Replace": ScalarDoc(("s", "old", "new")),
    "Coalesce": ScalarDoc(("a",), _COMMON),
    "If": ScalarDoc(("cond", "a", "b"), "the common type of a and b (int with float gives float)"),
    "Int": ScalarDoc(("x",)),
    "Float": ScalarDoc(("x",)),
    "String": ScalarDoc(("x",)),
    "Bool": ScalarDoc(("x",)),
}


def signature(name: str) -> str:
    """Return the documented signature of built-in ``name``, e.g. ``Contains(s: string, sub: string)``.

    Variadic functions end in ``, …``; a parameter accepting several types
    lists them with ``|``. Used by the docs and by E0401/E0402/E0219 hints.

    Args:
        name: canonical built-in name (a key of :data:`SCALAR_FUNCTIONS`).

    Returns:
        The signature text.

    Raises:
        KeyError: not a built-in (aliases are not resolved).

    >>> signature("Contains"), signature("EventTime")
    ('Contains(s: string, sub: string)', 'EventTime()')
    >>> signature("Coalesce")
    'Coalesce(a: bool|duration|float|int|string|time, …)'
    """
    fn = SCALAR_FUNCTIONS[name]
    names = SCALAR_DOCS[name].params
    parts = [f"{p}: {'|'.join(sorted(fn.accepts(i)))}" for i, p in enumerate(names)]
    if fn.max_args is None:
        parts.append("…")
    return f"{name}({', '.join(parts)})"


def result_text(name: str) -> str:
    """Return the documented result of built-in ``name``: its fixed type or its rule.

    Args:
        name: canonical built-in name (a key of :data:`SCALAR_FUNCTIONS`).

    Returns:
        A type name (``int``) or the rule of :attr:`ScalarDoc.result`.

    Raises:
        KeyError: not a built-in.

    >>> result_text("Len"), result_text("If")
    ('int', 'the common type of a and b (int with float gives float)')
    """
    doc = SCALAR_DOCS[name]
    if doc.result:
        return doc.result
    fn = SCALAR_FUNCTIONS[name]
    sample = [sorted(fn.accepts(i))[0] for i in range(fn.min_args)]
    return fn.result(sample) or "?"


class AggregateDoc(NamedTuple):
    """How an aggregate is documented (SPEC §2.4 table).

    Attributes:
        summary: what it computes over the counted writes, one line.
        result: the result type rule.
        empty: the value on an empty window, as JSON (``0``, ``null``,
            ``[]``); ``tests/compiler/test_docs.py`` checks it against the
            merge algebra.
    """

    summary: str
    result: str
    empty: str


#: Summary, result rule and empty-window value of every :data:`AGGREGATES` entry (for docs).
AGGREGATE_DOCS: dict[str, AggregateDoc] = {
    "Count": AggregateDoc("the number of counted writes (with values: those whose values are all non-null)",
                          "int", "0"),
    "CountUnique": AggregateDoc("the exact number of distinct values (or tuples of values)", "int", "0"),
    "Sum": AggregateDoc("the sum of the values; an int total outside 64 bits is null with the error "
                        "`integer overflow`", "int for an int value, else float", "0 (int) / 0.0 (float)"),
    "Min": AggregateDoc("the smallest value", "the value's type", "null"),
    "Max": AggregateDoc("the largest value", "the value's type", "null"),
    "Average": AggregateDoc("the arithmetic mean of the values", "float", "null"),
    "Latest": AggregateDoc("the value(s) of the latest counted write (by time, then arrival)",
                           "the value's type, or a struct of the values", "null"),
    "First": AggregateDoc("the value(s) of the earliest counted write (by time, then arrival)",
                          "the value's type, or a struct of the values", "null"),
    "LatestTime": AggregateDoc("the time of the latest counted write", "time", "null"),
    "FirstTime": AggregateDoc("the time of the earliest counted write", "time", "null"),
    "Sequence": AggregateDoc("the values of the counted writes, oldest first",
                             "array of the value's type, or of structs of the values", "[]"),
    "Set": AggregateDoc("the distinct values among the counted writes, sorted ascending",
                        "array of the value's type, or of tuples of the values", "[]"),
    "DecayedCount": AggregateDoc("the writes of all history, each weighed by exp(-(t - s) / W), W = `last`",
                                 "float", "0.0"),
    "DecayedSum": AggregateDoc("the values of all history, each weighed by exp(-(t - s) / W), W = `last`",
                               "float", "0.0"),
    "DecayedAverage": AggregateDoc("DecayedSum / DecayedCount of the value", "float", "null"),
    "HyperLogLog": AggregateDoc("the approximate number of distinct values (standard error ≤ 2%)", "int", "0"),
}
