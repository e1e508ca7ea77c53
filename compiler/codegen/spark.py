"""Spark code generator: scalar :class:`~compiler.plan.Expr` -> a ``Column`` (SPEC §2.3, §5.10).

Built-in column functions only (no Python UDF). Types: int and time are
``LongType`` (time = epoch ms), float and duration ``DoubleType`` (duration =
seconds), bool ``BooleanType``, string ``StringType``; aggregate results are
``ArrayType`` (``array<T>``), a ``StructType`` read by field name
(``struct{…}``) or a ``StructType`` read by position (``tuple{…}``), see
:func:`spark_ddl`.

Each node compiles to a *value* column and an *error* column (a never-null
boolean, or nothing when the node cannot fail). An error anywhere that the
Python engine would have evaluated makes the whole result null, exactly as
:class:`compiler.codegen.python.EvalError` makes the feature null there; the
lazy operators (``and``, ``or``, ``If``, ``Coalesce``) only take the error of
an operand the Python engine would have evaluated. Every operation that
could throw under ANSI mode is guarded (``try_add``, ``nullif`` on divisors,
clamped inputs before ``floor``/casts), so results do not depend on
``spark.sql.ansi.enabled``.

Semantics are those of :mod:`compiler.codegen.python` (its docstring lists
them); Spark-specific notes: ``~=`` is ``rlike`` (Java ``find``) on a literal
pattern; ``String(float)`` re-lays Java's ``Double.toString`` digits in
Python's ``repr`` layout (Java < 19 prints a few doubles with non-shortest
digits, see :func:`compiler.typesystem.format_float`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F

from compiler.codegen import UnsupportedError, tuple_index
from compiler.functions import TRIM_CHARACTERS
from compiler.plan import Expr
from compiler.typesystem import (
    _J_NUMBER,
    SPARK_TYPES,
    _double_to_long,
    _flag,
    _number_to_long,
    format_float_column,
    format_time_column,
    let,
    parse_time_column,
    parse_type,
)

__all__ = ["UnsupportedError", "compile_column", "compile_column_with_error", "spark_ddl"]

_NUMERIC = ("int", "float", "duration")
_INT64_MIN = -(1 << 63)


@dataclass(frozen=True)
class _C:
    v: Column
    err: Column | None
    type: str
    null: bool = False  # a known null (null literal or a null-typed operand)
    lit: Any = None
    is_lit: bool = False
    leaf: bool = False  # a column reference or literal: cheap to repeat in a tree


def spark_ddl(type_name: str) -> str:
    """Spark SQL DDL type of any plan type, composite ones included.

    Scalars as :data:`compiler.typesystem.SPARK_TYPES`; ``array<T>`` ->
    ``array<…>``; ``struct{a:T,…}`` -> ``struct<`a`:…>`` (fields by name);
    ``tuple{T1,T2,…}`` -> ``struct<`_1`:…,`_2`:…>`` (components by position,
    Spark's own tuple layout). Unknown names are ``string`` like ``null``.

    >>> spark_ddl("array<struct{ip:string,t:time}>")
    'array<struct<`ip`:string,`t`:bigint>>'
    >>> spark_ddl("tuple{string,float}")
    'struct<`_1`:string,`_2`:double>'
    """
    try:
        kind, param = parse_type(type_name)
    except ValueError:
        return "string"
    if kind == "array":
        return f"array<{spark_ddl(param)}>"
    if kind == "tuple":
        return "struct<" + ",".join(f"`_{k + 1}`:{spark_ddl(t)}" for k, t in enumerate(param)) + ">"
    if kind == "struct":
        return "struct<" + ",".join(f"`{name}`:{spark_ddl(t)}" for name, t in param) + ">"
    return SPARK_TYPES.get(param, "string")


def _kind(type_name: str) -> str:
    """``scalar``, ``array``, ``tuple`` or ``struct``."""
    try:
        return parse_type(type_name)[0]
    except ValueError:
        return "scalar"


def _array_item(arr: Column, idx: Column) -> Column:
    """``arr[idx]``, 0-based, negative from the end; null when either is null or
    ``idx`` is out of range (never an error, ANSI or not: the position is only
    computed, and cast to int, once it is known to be in range)."""
    n = F.size(arr).cast("long")
    in_range = arr.isNotNull() & (idx >= -n) & (idx < n)
    pos = F.when(idx < 0, idx + n).otherwise(idx).cast("int")
    return F.when(_flag(in_range), F.get(arr, pos))


def _java_quote(text: str) -> str:
    """``text`` as a Java regular expression that matches it literally (``java.util.regex.Pattern.quote``)."""
    return "\\Q" + text.replace("\\E", "\\E\\\\E\\Q") + "\\E"


def _split_text(s: Column, sep: Column | str) -> Column:
    """``Split(s, sep)``: Spark's ``split`` (a regular expression, limit -1: empty parts kept) of the quoted
    separator; an empty separator stays empty, which Spark splits into code points (``UTF8String.split``),
    as the Python engine does (``""`` gives ``[""]`` in both).

    Args:
        s: the text (string column).
        sep: the separator, a string literal (quoted here) or a string column (quoted per row).
    """
    if isinstance(sep, str):
        return F.split(s, _java_quote(sep) if sep else "", -1)
    quoted = F.concat(F.lit("\\Q"), F.replace(sep, F.lit("\\E"), F.lit("\\E\\\\E\\Q")), F.lit("\\E"))
    return F.when(sep == F.lit(""), F.split(s, F.lit(""), -1)).otherwise(F.split(s, quoted, -1))


def _or(*errs: Column | None) -> Column | None:
    out = None
    for e in errs:
        if e is not None:
            out = e if out is None else (out | e)
    return out


def _null(type_name: str) -> Column:
    return F.lit(None).cast(SPARK_TYPES.get(type_name, "string"))


def _dbl(c: _C) -> Column:
    return c.v.cast("double") if c.type in ("int", "time") else c.v


def _long(n: int | None) -> Column:
    return F.lit(n).cast("long")


def _check_regex(pattern: str, node: Expr) -> None:
    """Refuse a pattern either regex dialect rejects, at compile time (Python's ``re``
    always; ``java.util.regex`` too when a classic SparkContext is running)."""
    try:
        re.compile(pattern, re.ASCII)
    except re.error as exc:
        raise UnsupportedError(f"invalid regular expression {pattern!r}: {exc}", node) from None
    try:
        from pyspark import SparkContext

        jvm = SparkContext._jvm  # best effort; absent under Spark Connect
    except Exception:  # pragma: no cover
        jvm = None
    if jvm is None:
        return
    try:
        jvm.java.util.regex.Pattern.compile(pattern)
    except Exception as exc:  # py4j wraps PatternSyntaxException
        raise UnsupportedError(f"invalid regular expression {pattern!r} for Java: {exc}", node) from None


def _floor_to_long(x: Column) -> Column:
    """``floor(x)`` as a long; null when NaN, infinite or beyond 64 bits."""
    return _double_to_long(x, floor=True)[0]


def _trunc_to_long(x: Column) -> Column:
    """``x`` truncated toward zero as a long; null when NaN, infinite or beyond 64 bits."""
    return _double_to_long(x, floor=False)[0]


def _ms_shift(d: Column) -> Column:
    """Milliseconds a duration of ``d`` seconds moves a time: ``floor(d * 1000 + 0.5)``."""
    return _floor_to_long(d * 1000.0 + 0.5)


def _floordiv_int(a: Column, b: Column) -> Column:
    """Python ``//`` on longs (null for /0 and INT64_MIN // -1; the caller flags those)."""
    bnz = F.nullif(b, _long(0))
    a_safe = F.when(~_flag((a == _long(_INT64_MIN)) & (b == _long(-1))), a)
    q = F.call_function("div", a_safe, bnz)
    rem = a_safe % bnz
    return F.when((rem != 0) & ((rem < 0) != (b < 0)), q - 1).otherwise(q)


def _floordiv_float(a: Column, b: Column) -> Column:
    """``floor(a / b)`` as a double (null for /0)."""
    q = a / F.nullif(b, F.lit(0.0))
    fl, in_range = _double_to_long(q, floor=True)
    return F.when(in_range, fl.cast("double")).otherwise(q)


def _mod_int(a: Column, b: Column) -> Column:
    """Python ``%`` on longs: the result has the divisor's sign (null for %0)."""
    rem = a % F.nullif(b, _long(0))
    return F.when((rem != 0) & ((rem < 0) != (b < 0)), rem + b).otherwise(rem)


def _mod_float(a: Column, b: Column) -> Column:
    """Python ``%`` on doubles: ``fmod`` moved to the divisor's sign, a zero signed like it."""
    rem = a % F.nullif(b, F.lit(0.0))
    return (F.when(rem == 0, F.lit(0.0) * F.signum(b))
            .when((rem < 0) != (b < 0), rem + b)
            .otherwise(rem))


def _shl(a: Column, b: Column) -> Column:
    """``a << b``; null for a negative count or 64-bit overflow (the caller flags those)."""
    small = _flag((b >= 0) & (b <= 63))
    n = F.when(small, b).otherwise(_long(0)).cast("int")
    r = F.call_function("shiftleft", a, n)
    back = F.call_function("shiftright", r, n)
    bad = (b < 0) | ((a != 0) & (~small | (back != a)))
    return F.when(_flag(bad), _long(None)).when(a == 0, _long(0)).otherwise(r)


def _int_of_string(a: Column) -> Column:
    """``Int(s)``: null when not numeric or out of range."""
    v, _lossy, _ok = _number_to_long(a, F.lit(False))
    return v


class _Gen:
    def __init__(self, cols: Mapping[str, Column], event_time_ms: Column) -> None:
        self.cols = cols
        self.event_time_ms = event_time_ms

    # ------------------------------------------------------------- helpers
    def notnull(self, args: list[_C]) -> Column | None:
        """All (possibly null) operands non-null: the Python engine only errs then."""
        conds = [a.v.isNotNull() for a in args if not a.is_lit]
        if not conds:
            return None
        out = conds[0]
        for c in conds[1:]:
            out = out & c
        return out

    def local(self, args: list[_C], cond: Column) -> Column:
        nn = self.notnull(args)
        return _flag(cond if nn is None else (nn & cond))

    def result(self, args: list[_C], value: Column, type_name: str, local: Column | None = None) -> _C:
        """A null-propagating node; known-null operands make a null result."""
        err = _or(*(a.err for a in args), local)
        if any(a.null for a in args):
            return _C(_null(type_name), _or(*(a.err for a in args)), type_name, null=True)
        return _C(value, err, type_name)

    def overflow(self, args: list[_C], r: Column) -> Column:
        return self.local(args, r.isNull())

    @staticmethod
    def apply(fn: Callable[..., Column], *args: _C) -> Column:
        """``fn`` over the operands' values; non-leaf operands are bound once (:func:`let`)
        so formulas that use an operand several times do not copy its tree."""
        if all(a.leaf for a in args):
            return fn(*(a.v for a in args))
        return let(fn, *(a.v for a in args))

    # ---------------------------------------------------------------- nodes
    def gen(self, e: Expr) -> _C:
        c = self.node(e)
        if e.type in ("float", "duration") and c.type in ("int", "time"):
            return replace(c, v=c.v.cast("double"), type=e.type)
        if e.type in ("float", "duration") and c.type in ("float", "duration"):
            return replace(c, type=e.type)
        return c

    def node(self, e: Expr) -> _C:
        if e.kind == "lit":
            return self.literal(e)
        if e.kind == "ref":
            if e.name not in self.cols:
                raise UnsupportedError(f"no column for feature {e.name!r}", e)
            col = self.cols[e.name]
            if e.type in ("int", "time"):
                col = col.cast("long")
            elif e.type in ("float", "duration"):
                col = col.cast("double")
            return _C(col, None, e.type, null=e.type == "null", leaf=True)
        if e.kind in ("op", "call"):
            method = getattr(self, f"{e.kind}_{e.op}", None)
            if method is None:
                what = "operator" if e.kind == "op" else "function"
                raise UnsupportedError(f"{what} {e.op!r} is not supported", e)
            return method(e)
        raise UnsupportedError(f"{e.kind!r} node is not supported here", e)

    def literal(self, e: Expr) -> _C:
        value = e.value
        if value is None:
            return _C(_null(e.type), None, e.type, null=True, is_lit=True, leaf=True)
        if e.type in ("float", "duration"):
            value = float(value)
            col = F.lit(value)
        elif e.type in ("int", "time"):
            value = int(value)
            col = F.lit(value).cast("long")
        elif e.type == "bool" and isinstance(value, bool):
            col = F.lit(value)
        elif e.type == "string" and isinstance(value, str):
            col = F.lit(value)
        else:
            raise UnsupportedError(f"literal of type {e.type!r} not supported: {value!r}", e)
        return _C(col, None, e.type, lit=value, is_lit=True, leaf=True)

    def args(self, e: Expr, n: int | None = None) -> list[_C]:
        if n is not None and len(e.args) != n:
            raise UnsupportedError(f"{e.op or e.kind} takes {n} argument(s), got {len(e.args)}", e)
        return [self.gen(a) for a in e.args]

    def need_int(self, e: Expr, *cs: _C) -> None:
        for c in cs:
            if c.type not in ("int", "null"):
                raise UnsupportedError(f"{e.op} needs int operands, got {c.type}", e)

    # unary
    def op_neg(self, e: Expr) -> _C:
        (a,) = self.args(e, 1)
        if a.type == "int":
            r = F.try_subtract(_long(0), a.v)
            return self.result([a], r, "int", self.overflow([a], r))
        return self.result([a], -a.v, a.type)

    def op_bitnot(self, e: Expr) -> _C:
        (a,) = self.args(e, 1)
        self.need_int(e, a)
        return self.result([a], F.bitwise_not(a.v), "int")

    # arithmetic
    def arith(self, a: _C, b: _C, int_fn: Callable[[Column, Column], Column],
              float_fn: Callable[[Column, Column], Column], type_name: str) -> _C:
        if a.type == "int" and b.type == "int":
            r = int_fn(a.v, b.v)
            return self.result([a, b], r, "int", self.overflow([a, b], r))
        r = float_fn(_dbl(a), _dbl(b))
        return self.result([a, b], r, type_name, _flag(F.isnan(r)))

    @staticmethod
    def float_type(a: _C, b: _C) -> str:
        return "duration" if "duration" in (a.type, b.type) else "float"

    def op_mul(self, e: Expr) -> _C:
        a, b = self.args(e, 2)
        return self.arith(a, b, F.try_multiply, lambda x, y: x * y, self.float_type(a, b))

    def op_div(self, e: Expr) -> _C:
        a, b = self.args(e, 2)
        out = e.type if e.type in ("float", "duration") else "float"
        db = _dbl(b)
        r = _dbl(a) / F.nullif(db, F.lit(0.0))
        return self.result([a, b], r, out, self.local([a, b], db == 0) | _flag(F.isnan(r)))

    def op_floordiv(self, e: Expr) -> _C:
        a, b = self.args(e, 2)
        if a.type == "int" and b.type == "int":
            too_big = (a.v == _long(_INT64_MIN)) & (b.v == _long(-1))
            r = self.apply(_floordiv_int, a, b)
            return self.result([a, b], r, "int", self.local([a, b], (b.v == 0) | too_big))
        r = self.apply(_floordiv_float, replace(a, v=_dbl(a)), replace(b, v=_dbl(b)))
        return self.result([a, b], r, "float", self.local([a, b], _dbl(b) == 0) | _flag(F.isnan(r)))

    def op_mod(self, e: Expr) -> _C:
        a, b = self.args(e, 2)
        if a.type == "int" and b.type == "int":
            r = self.apply(_mod_int, a, b)
            return self.result([a, b], r, "int", self.local([a, b], b.v == 0))
        r = self.apply(_mod_float, replace(a, v=_dbl(a)), replace(b, v=_dbl(b)))
        out = "duration" if a.type == "duration" else "float"
        return self.result([a, b], r, out, self.local([a, b], _dbl(b) == 0) | _flag(F.isnan(r)))

    def shift_time(self, t: _C, d: _C, sign: int) -> _C:
        ms = self.apply(_ms_shift, replace(d, v=_dbl(d)))
        r = F.try_add(t.v, ms) if sign > 0 else F.try_subtract(t.v, ms)
        return self.result([t, d], r, "time", self.overflow([t, d], r))

    def op_add(self, e: Expr) -> _C:
        a, b = self.args(e, 2)
        if a.type == "string" or b.type == "string":
            return self.result([a, b], F.concat(a.v, b.v), "string")
        if a.type == "time" and b.type != "time":
            return self.shift_time(a, b, +1)
        if b.type == "time" and a.type != "time":
            return self.shift_time(b, a, +1)
        return self.arith(a, b, F.try_add, lambda x, y: x + y, self.float_type(a, b))

    def op_sub(self, e: Expr) -> _C:
        a, b = self.args(e, 2)
        if a.type == "time" and b.type == "time":
            d = F.try_subtract(a.v, b.v)
            return self.result([a, b], d.cast("double") / 1000.0, "duration", self.overflow([a, b], d))
        if a.type == "time":
            return self.shift_time(a, b, -1)
        return self.arith(a, b, F.try_subtract, lambda x, y: x - y, self.float_type(a, b))

    # bits
    def op_shl(self, e: Expr) -> _C:
        a, b = self.args(e, 2)
        self.need_int(e, a, b)
        r = self.apply(_shl, a, b)
        return self.result([a, b], r, "int", self.overflow([a, b], r))

    def op_shr(self, e: Expr) -> _C:
        a, b = self.args(e, 2)
        self.need_int(e, a, b)
        n = F.when(b.v > 63, _long(63)).when(b.v < 0, _long(0)).otherwise(b.v).cast("int")
        r = F.call_function("shiftright", a.v, n)
        return self.result([a, b], r, "int", self.local([a, b], b.v < 0))

    def bitwise(self, e: Expr, op: str) -> _C:
        a, b = self.args(e, 2)
        if a.type == "bool" or b.type == "bool":
            x, y = a.v, b.v
            r = {"and": x & y, "or": x | y, "xor": x != y}[op]
            r = F.when(x.isNull() | y.isNull(), F.lit(None).cast("boolean")).otherwise(r)
            return self.result([a, b], r, "bool")
        self.need_int(e, a, b)
        fn = {"and": a.v.bitwiseAND, "or": a.v.bitwiseOR, "xor": a.v.bitwiseXOR}[op]
        return self.result([a, b], fn(b.v), "int")

    def op_bitand(self, e: Expr) -> _C:
        return self.bitwise(e, "and")

    def op_bitxor(self, e: Expr) -> _C:
        return self.bitwise(e, "xor")

    def op_bitor(self, e: Expr) -> _C:
        return self.bitwise(e, "or")

    # comparison
    def compare(self, e: Expr, fn: Callable[[Column, Column], Column]) -> _C:
        a, b = self.args(e, 2)
        if a.type != b.type and a.type in _NUMERIC and b.type in _NUMERIC:
            return self.result([a, b], fn(_dbl(a), _dbl(b)), "bool")
        return self.result([a, b], fn(a.v, b.v), "bool")

    def op_eq(self, e: Expr) -> _C:
        return self.compare(e, lambda x, y: x == y)

    def op_ne(self, e: Expr) -> _C:
        return self.compare(e, lambda x, y: x != y)

    def op_lt(self, e: Expr) -> _C:
        return self.compare(e, lambda x, y: x < y)

    def op_gt(self, e: Expr) -> _C:
        return self.compare(e, lambda x, y: x > y)

    def op_le(self, e: Expr) -> _C:
        return self.compare(e, lambda x, y: x <= y)

    def op_ge(self, e: Expr) -> _C:
        return self.compare(e, lambda x, y: x >= y)

    def op_match(self, e: Expr) -> _C:
        if len(e.args) != 2:
            raise UnsupportedError("~= takes 2 operands", e)
        pattern = e.args[1]
        if pattern.kind != "lit" or not (pattern.value is None or isinstance(pattern.value, str)):
            raise UnsupportedError("the right side of ~= must be a string literal", e)
        a = self.gen(e.args[0])
        if pattern.value is None:
            return self.result([a, _C(_null("string"), None, "string", null=True, is_lit=True)],
                               _null("bool"), "bool")
        _check_regex(pattern.value, e)
        return self.result([a], a.v.rlike(pattern.value), "bool")

    def op_in(self, e: Expr, negate: bool = False) -> _C:
        if len(e.args) != 2 or e.args[1].kind != "list":
            raise UnsupportedError("in takes a needle and a list", e)
        needle = self.gen(e.args[0])
        items = [self.gen(x) for x in e.args[1].args]
        every = [needle, *items]
        floaty = any(x.type in ("float", "duration") for x in every) and any(x.type == "int" for x in every)
        conv = _dbl if floaty else (lambda c: c.v)
        err = _or(needle.err, *(x.err for x in items))
        if needle.null:
            return _C(_null("bool"), err, "bool", null=True)
        if not items:
            r = F.when(needle.v.isNull(), F.lit(None).cast("boolean")).otherwise(F.lit(negate))
            return _C(r, err, "bool")
        r = conv(needle).isin(*[conv(x) if not x.null else F.lit(None) for x in items])
        return _C(~r if negate else r, err, "bool")

    def op_not_in(self, e: Expr) -> _C:
        return self.op_in(e, negate=True)

    def op_is_null(self, e: Expr) -> _C:
        (a,) = self.args(e, 1)
        return _C(F.lit(True) if a.null else a.v.isNull(), a.err, "bool")

    def op_is_not_null(self, e: Expr) -> _C:
        (a,) = self.args(e, 1)
        return _C(F.lit(False) if a.null else a.v.isNotNull(), a.err, "bool")

    # logic (SQL three-valued logic is Spark's own for &, |, ~)
    def op_not(self, e: Expr) -> _C:
        (a,) = self.args(e, 1)
        return _C(~a.v.cast("boolean"), a.err, "bool")

    def logic(self, e: Expr, is_and: bool) -> _C:
        a, b = self.args(e, 2)
        av, bv = a.v.cast("boolean"), b.v.cast("boolean")
        value = (av & bv) if is_and else (av | bv)
        err = a.err
        if b.err is not None:
            # b is evaluated unless a already decides (false for and, true for or)
            decided = _flag(av == F.lit(not is_and))
            err = _or(err, ~decided & b.err)
        return _C(value, err, "bool")

    def op_and(self, e: Expr) -> _C:
        return self.logic(e, True)

    def op_or(self, e: Expr) -> _C:
        return self.logic(e, False)

    # access (SPEC §2.3 ``.`` and ``[]``)
    def op_field(self, e: Expr) -> _C:
        """``x.name``: ``getField`` of the struct column (by field name)."""
        if len(e.args) != 2 or e.args[1].kind != "lit" or not isinstance(e.args[1].value, str):
            raise UnsupportedError("field takes a struct and a string literal name", e)
        a = self.gen(e.args[0])
        if a.null:
            return self.result([a], _null(e.type), e.type)
        if _kind(a.type) != "struct":
            raise UnsupportedError(f"field of {a.type} is not supported", e)
        return self.result([a], a.v.getField(e.args[1].value), e.type)

    def op_index(self, e: Expr) -> _C:
        """``x[i]``: an array item (:func:`_array_item`) or a tuple component (by position)."""
        if len(e.args) != 2:
            raise UnsupportedError("index takes 2 operands", e)
        kind = "null" if e.args[0].type == "null" else _kind(e.args[0].type)
        if kind == "tuple":
            k = tuple_index(e, len(parse_type(e.args[0].type)[1]))
            a = self.gen(e.args[0])
            if a.null:
                return self.result([a], _null(e.type), e.type)
            # a struct-to-struct cast is positional: it names the components _1, _2, ...
            return self.result([a], a.v.cast(spark_ddl(e.args[0].type)).getField(f"_{k + 1}"), e.type)
        if kind not in ("array", "null"):
            raise UnsupportedError(f"index of {e.args[0].type} is not supported", e)
        a, i = self.args(e, 2)
        if i.type not in ("int", "null"):
            raise UnsupportedError(f"an array index must be an int, got {i.type}", e)
        if a.null or i.null:
            return self.result([a, i], _null(e.type), e.type)
        return self.result([a, i], self.apply(_array_item, a, i), e.type)

    # ------------------------------------------------------------ built-ins
    def call_EventTime(self, e: Expr) -> _C:
        self.args(e, 0)
        return _C(self.event_time_ms.cast("long"), None, "time", leaf=True)

    def call_Time(self, e: Expr) -> _C:
        (a,) = self.args(e, 1)
        if a.type in ("time", "int", "null"):
            return replace(a, type="time")
        if a.type == "string":
            ms = parse_time_column(a.v, bind=not a.leaf)
            return self.result([a], ms, "time", self.overflow([a], ms))
        if a.type == "float":
            ms = self.apply(_floor_to_long, a)
            return self.result([a], ms, "time", self.overflow([a], ms))
        raise UnsupportedError(f"{e.op} of {a.type} is not supported", e)

    call_ParseTime = call_Time

    def call_FromUnixSeconds(self, e: Expr) -> _C:
        (a,) = self.args(e, 1)
        if a.type == "int":
            r = F.try_multiply(a.v, _long(1000))
            return self.result([a], r, "time", self.overflow([a], r))
        if a.type in ("float", "null"):
            ms = _floor_to_long(a.v * 1000.0) if a.leaf else let(_floor_to_long, a.v * 1000.0)
            return self.result([a], ms, "time", self.overflow([a], ms))
        raise UnsupportedError(f"FromUnixSeconds of {a.type} is not supported", e)

    def per_unit(self, e: Expr, seconds: float) -> _C:
        (a,) = self.args(e, 1)
        if a.type not in (*_NUMERIC, "null"):
            raise UnsupportedError(f"{e.op} of {a.type} is not supported", e)
        v = _dbl(a) if seconds == 1.0 else _dbl(a) / F.lit(seconds)
        return self.result([a], v, "float")

    def call_Days(self, e: Expr) -> _C:
        return self.per_unit(e, 86400.0)

    def call_Hours(self, e: Expr) -> _C:
        return self.per_unit(e, 3600.0)

    def call_Minutes(self, e: Expr) -> _C:
        return self.per_unit(e, 60.0)

    def call_Seconds(self, e: Expr) -> _C:
        return self.per_unit(e, 1.0)

    def call_Len(self, e: Expr) -> _C:
        (a,) = self.args(e, 1)
        if _kind(a.type) == "array":
            # size(null) is -1 unless ANSI mode is on: keep null a null
            return self.result([a], F.when(a.v.isNotNull(), F.size(a.v).cast("long")), "int")
        if a.type not in ("string", "null"):
            raise UnsupportedError(f"Len of {a.type} is not supported", e)
        return self.result([a], F.char_length(a.v).cast("long"), "int")

    call_Length = call_Len

    def extremum(self, e: Expr, fn: Callable[..., Column]) -> _C:
        if not e.args:
            raise UnsupportedError(f"{e.op} needs at least one argument", e)
        vals = self.args(e)
        floaty = any(x.type in ("float", "duration") for x in vals)
        cols = [_dbl(x) if floaty else x.v for x in vals]
        out = e.type if e.type != "null" else vals[0].type
        if len(cols) == 1:
            return self.result(vals, cols[0], out)
        any_null = cols[0].isNull()
        for c in cols[1:]:
            any_null = any_null | c.isNull()
        value = F.when(any_null, _null(out)).otherwise(fn(*cols))
        return self.result(vals, value, out)

    def call_Maximum(self, e: Expr) -> _C:
        return self.extremum(e, F.greatest)

    def call_Minimum(self, e: Expr) -> _C:
        return self.extremum(e, F.least)

    def call_Lower(self, e: Expr) -> _C:
        (a,) = self.args(e, 1)
        return self.result([a], F.lower(a.v), "string")

    def call_Upper(self, e: Expr) -> _C:
        (a,) = self.args(e, 1)
        return self.result([a], F.upper(a.v), "string")

    def call_Contains(self, e: Expr) -> _C:
        a, b = self.args(e, 2)
        return self.result([a, b], a.v.contains(b.v), "bool")

    def call_StartsWith(self, e: Expr) -> _C:
        a, b = self.args(e, 2)
        return self.result([a, b], a.v.startswith(b.v), "bool")

    def call_EndsWith(self, e: Expr) -> _C:
        a, b = self.args(e, 2)
        return self.result([a, b], a.v.endswith(b.v), "bool")

    def call_Split(self, e: Expr) -> _C:
        a, b = self.args(e, 2)
        sep = e.args[1]
        if sep.kind == "lit" and isinstance(sep.value, str):
            return self.result([a, b], _split_text(a.v, sep.value), "array<string>")
        return self.result([a, b], self.apply(_split_text, a, b), "array<string>")

    def call_Trim(self, e: Expr) -> _C:
        (a,) = self.args(e, 1)
        return self.result([a], F.trim(a.v, F.lit(TRIM_CHARACTERS)), "string")

    def call_Replace(self, e: Expr) -> _C:
        a, b, c = self.args(e, 3)
        return self.result([a, b, c], F.replace(a.v, b.v, c.v), "string")

    def convert(self, c: _C, type_name: str) -> Column:
        if c.null:
            return _null(type_name)
        if type_name in ("float", "duration"):
            return _dbl(c)
        return c.v

    def call_Coalesce(self, e: Expr) -> _C:
        if not e.args:
            raise UnsupportedError("Coalesce needs at least one argument", e)
        vals = self.args(e)
        out = e.type
        cols = [self.convert(x, out) for x in vals]
        # error: x_i errs and every earlier value was null (so Python evaluated x_i)
        err: Column | None = None
        for x in reversed(vals):
            tail = err
            if tail is not None:
                tail = _flag(x.v.isNull()) & tail
            err = _or(x.err, tail)
        value = cols[0] if len(cols) == 1 else F.coalesce(*cols)
        return _C(value, err, out)

    def call_If(self, e: Expr) -> _C:
        if len(e.args) != 3:
            raise UnsupportedError("If takes 3 arguments", e)
        cond, x, y = self.args(e, 3)
        out = e.type
        taken = _flag(cond.v.cast("boolean"))
        value = F.when(taken, self.convert(x, out)).otherwise(self.convert(y, out))
        branch_err = None
        if x.err is not None or y.err is not None:
            branch_err = F.when(taken, x.err if x.err is not None else F.lit(False)) \
                .otherwise(y.err if y.err is not None else F.lit(False))
        return _C(value, _or(cond.err, branch_err), out)

    def call_Int(self, e: Expr) -> _C:
        (a,) = self.args(e, 1)
        t = a.type
        if t in ("int", "time", "null"):
            return replace(a, type="int")
        if t in ("float", "duration"):
            v = self.apply(_trunc_to_long, a)
            return self.result([a], v, "int", self.overflow([a], v))
        if t == "string":
            r = self.apply(_int_of_string, a)
            return self.result([a], r, "int", self.overflow([a], r))
        if t == "bool":
            return self.result([a], a.v.cast("long"), "int")
        raise UnsupportedError(f"Int of {t} is not supported", e)

    def call_Float(self, e: Expr) -> _C:
        (a,) = self.args(e, 1)
        t = a.type
        if t in ("float", "duration", "null"):
            return replace(a, type="float")
        if t in ("int", "time", "bool"):
            return self.result([a], a.v.cast("double"), "float")
        if t == "string":
            ok = _flag(a.v.rlike(_J_NUMBER))
            v = F.when(ok, a.v.try_cast("double"))
            return self.result([a], v, "float", self.local([a], ~ok))
        raise UnsupportedError(f"Float of {t} is not supported", e)

    def call_String(self, e: Expr) -> _C:
        (a,) = self.args(e, 1)
        t = a.type
        if t in ("string", "null"):
            return replace(a, type="string")
        if t in ("int", "bool"):
            return self.result([a], a.v.cast("string"), "string")
        if t in ("float", "duration"):
            return self.result([a], format_float_column(a.v, bind=not a.leaf), "string")
        if t == "time":
            text = self.apply(format_time_column, a)
            return self.result([a], text, "string", self.overflow([a], text))
        raise UnsupportedError(f"String of {t} is not supported", e)

    def call_Bool(self, e: Expr) -> _C:
        (a,) = self.args(e, 1)
        t = a.type
        if t in ("bool", "null"):
            return replace(a, type="bool")
        if t in ("int", "float"):
            return self.result([a], a.v != 0, "bool")
        if t == "string":
            low = F.lower(a.v)
            v = F.when(low == "true", F.lit(True)).when(low == "false", F.lit(False))
            return self.result([a], v, "bool", self.local([a], v.isNull()))
        raise UnsupportedError(f"Bool of {t} is not supported", e)


def compile_column_with_error(
    expr: Expr, cols: Mapping[str, Column], event_time_ms: Column
) -> tuple[Column, Column]:
    """Compile a scalar expression to a Spark value column and its error flag.

    Args:
        expr: the typed expression tree.
        cols: a column for every feature the expression references (values
            in run-time representation: time ``LongType`` ms, duration
            ``DoubleType`` seconds).
        event_time_ms: ``LongType`` column of the event time, for ``EventTime()``.

    Returns:
        ``(value, error)``: the value typed per :func:`spark_ddl` (null
        where the Python engine raises
        :class:`~compiler.codegen.python.EvalError`), and a never-null
        ``BooleanType`` column, true exactly there.

    Raises:
        UnsupportedError: a node Spark cannot express, or a missing column.
    """
    c = _Gen(cols, event_time_ms).gen(expr)
    spark_type = spark_ddl(expr.type)
    value = c.v.cast(spark_type)
    if c.err is None:
        return value, F.lit(False)
    return F.when(c.err, F.lit(None).cast(spark_type)).otherwise(value), c.err


def compile_column(expr: Expr, cols: Mapping[str, Column], event_time_ms: Column) -> Column:
    """Compile a scalar expression to a Spark column with the Python engine's values (SPEC §5.10).

    Args:
        expr: the typed expression tree (:class:`compiler.plan.Expr`).
        cols: feature name -> column, for every referenced feature.
        event_time_ms: ``LongType`` epoch-ms column for ``EventTime()``.

    Returns:
        The value column (time ``LongType`` ms, duration ``DoubleType``
        seconds, int ``LongType``, float ``DoubleType``); evaluation errors
        are null.

    Raises:
        UnsupportedError: a node Spark cannot express (at compile time).
    """
    return compile_column_with_error(expr, cols, event_time_ms)[0]
