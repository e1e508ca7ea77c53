"""Types, input coercion and value encodings, for Python and Spark (SPEC §2.2, §3.1, §3.5).

Run-time representation (the contract of :mod:`compiler.plan`): ``bool`` ->
``bool``, ``int`` -> ``int`` (64-bit), ``float`` -> ``float``, ``string`` ->
``str``, ``time`` -> ``int`` UTC epoch **milliseconds**, ``duration`` ->
``float`` **seconds**, null -> ``None``. In Spark: ``LongType`` for int and
time, ``DoubleType`` for float and duration (see :data:`SPARK_TYPES`).

Coercion table (SPEC §2.2, after Sumatra's), applied by :func:`coerce` in
Python and by :func:`input_column` in Spark with identical results:

========== ================================================================
target     accepted raw JSON values
========== ================================================================
any        ``null`` and the string ``"null"`` -> null, no error; an object
           or array -> null with an error.
``bool``   ``true``/``false``; strings ``"true"``/``"false"`` (any case).
``int``    integers in the 64-bit range; floats and numeric strings: an
           integral value -> that int, a fractional one -> truncated toward
           zero **with** the error ``loss of precision`` (``5.6`` -> 5);
           out of range / non-numeric -> null with an error.
``float``  numbers; numeric strings.
``string`` strings as is; ``true``/``false`` -> ``"true"``/``"false"``;
           integers -> decimal digits; floats -> :func:`format_float`.
``time``   ISO-8601 strings (:func:`parse_time`; naive means UTC); numbers
           and numeric strings as epoch milliseconds (fractions floored).
========== ================================================================

A *numeric string* matches :data:`NUMBER_PATTERN` exactly (optional sign,
digits with an optional fraction, optional exponent; no spaces, no ``inf``,
no ``nan``); an *integer string* matches :data:`INTEGER_PATTERN` and is read
exactly (never through a double).

Known Spark differences (documented, not hidden): the JSON number ``-0.0``
reads as ``0.0``; a float token with a zero fraction and 19+ digits
(``12345678901234567890.0``) read as ``string`` keeps its digits in Spark
(Python prints ``1.2345678901234567e+19``); a JSON key that is empty, ``*``,
or holds ``'`` together with ``.``/``[``/``]`` cannot be addressed in a Spark
path (:func:`json_path` raises). Spark's ISO parsing also relies on
``spark.sql.legacy.timeParserPolicy`` being left at its default.

Source: SPEC §2.2 (inputs, coercion), §3.1 (time), §3.5 (JSON encodings).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from compiler.plan import InputSpec

if TYPE_CHECKING:  # pragma: no cover - typing only; pyspark is imported lazily
    from pyspark.sql import Column

__all__ = [
    "INT64_MIN",
    "INT64_MAX",
    "MIN_TIME_MS",
    "MAX_TIME_MS",
    "INPUT_TYPES",
    "SPARK_TYPES",
    "NUMBER_PATTERN",
    "INTEGER_PATTERN",
    "read_path",
    "coerce",
    "read_input",
    "parse_time",
    "format_time",
    "format_float",
    "to_json_value",
    "parse_type",
    "spark_type",
    "json_path",
    "input_column",
    "input_column_with_error",
    "variant_token",
    "time_column",
    "parse_time_column",
    "format_time_column",
    "format_float_column",
    "let",
]

#: Smallest / largest 64-bit integer (the ``int`` range).
INT64_MIN = -(1 << 63)
INT64_MAX = (1 << 63) - 1
#: ``0000-01-01T00:00:00.000Z`` and ``9999-12-31T23:59:59.999Z`` in epoch ms:
#: the range :func:`format_time` (and ``String(time)``) can print.
MIN_TIME_MS = -62_167_219_200_000
MAX_TIME_MS = 253_402_300_799_999
#: Input types allowed after ``as`` (SPEC §2.2).
INPUT_TYPES = ("bool", "int", "float", "string", "time")
#: Spark SQL type (DDL name) of each scalar type; ``null`` is typed as string.
SPARK_TYPES = {
    "bool": "boolean",
    "int": "bigint",
    "float": "double",
    "string": "string",
    "time": "bigint",
    "duration": "double",
    "null": "string",
}

#: A numeric string (same text in Python ``re`` and Java regex).
NUMBER_PATTERN = r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?"
#: An integer string.
INTEGER_PATTERN = r"[+-]?[0-9]+"
#: ISO-8601 date or date-time: ``YYYY-MM-DD[(T|t| )HH:MM[:SS[(.|,)f{1,9}]][Z|z|±HH[[:]MM]]]``.
#: Groups: 1 year, 2 month, 3 day, 4 hour, 5 minute, 6 second, 7 fraction,
#: 8 ``Z``, 9 offset sign, 10 offset hours, 11 offset minutes.
TIME_PATTERN = (
    r"([0-9]{4})-([0-9]{2})-([0-9]{2})"
    r"(?:[Tt ]([0-9]{2}):([0-9]{2})(?::([0-9]{2})(?:[.,]([0-9]{1,9}))?)?"
    r"(?:([Zz])|([+-])([0-9]{2})(?::?([0-9]{2}))?)?)?"
)

_NUMBER_RE = re.compile(NUMBER_PATTERN)
_INTEGER_RE = re.compile(INTEGER_PATTERN)
_TIME_RE = re.compile(TIME_PATTERN)
# Java: anchored at both ends; \z so a trailing newline never matches (Python fullmatch).
_J_NUMBER = "^" + NUMBER_PATTERN + r"\z"
_J_INTEGER = "^" + INTEGER_PATTERN + r"\z"
_J_TIME = "^" + TIME_PATTERN + r"\z"

_MS_PER_DAY = 86_400_000
# Largest UTC offset accepted, in minutes: ±18:00 (java.time's limit, so both engines agree).
_MAX_OFFSET_MIN = 18 * 60
# Days from 0000-03-01 to 1970-01-01 in Hinnant's civil calendar algorithms.
_EPOCH_SHIFT_DAYS = 719_468
_DAYS_PER_400Y = 146_097
# float bounds for a value that converts to int64 without overflow.
_F_INT64_LO = -9.223372036854775808e18
_F_INT64_HI = 9.223372036854775808e18


# --------------------------------------------------------------------- Python
def read_path(payload: Any, path: tuple[str | int, ...]) -> Any:
    """Read a JSON path from a parsed event payload.

    Args:
        payload: the parsed JSON object (``dict``/``list``/scalars).
        path: steps after ``$``: ``str`` object keys, ``int`` array indexes
            (``$.a.b[0]`` is ``("a", "b", 0)``).

    Returns:
        The value found, or ``None`` when any step is missing, out of range,
        negative or applied to the wrong kind of value.

    >>> read_path({"a": {"b": [7, 8]}}, ("a", "b", 1))
    8
    >>> read_path({"a": 1}, ("a", "b")) is None
    True
    """
    node = payload
    for step in path:
        if isinstance(step, str):
            if not isinstance(node, dict):
                return None
            node = node.get(step)
        else:
            if not isinstance(node, list) or step < 0 or step >= len(node):
                return None
            node = node[step]
        if node is None:
            return None
    return node


def _days_from_civil(y: int, m: int, d: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (Hinnant), year >= 0."""
    y -= m <= 2
    y += 400  # keep every quantity non-negative (same as the Spark version)
    era = y // 400
    yoe = y - era * 400
    doy = (153 * (m - 3 if m > 2 else m + 9) + 2) // 5 + d - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * _DAYS_PER_400Y + doe - _EPOCH_SHIFT_DAYS - _DAYS_PER_400Y


def _days_in_month(y: int, m: int) -> int:
    if m == 2:
        return 29 if (y % 4 == 0 and y % 100 != 0) or y % 400 == 0 else 28
    return 30 if m in (4, 6, 9, 11) else 31


def _parse_iso(s: str) -> int:
    mt = _TIME_RE.fullmatch(s)
    if mt is None:
        raise ValueError(f"invalid time {s!r}")
    y, mo, d = int(mt[1]), int(mt[2]), int(mt[3])
    h = int(mt[4] or 0)
    mi = int(mt[5] or 0)
    sec = int(mt[6] or 0)
    frac_ms = int((mt[7] or "")[:3].ljust(3, "0"))
    oh = int(mt[10] or 0)
    om = int(mt[11] or 0)
    if not (1 <= mo <= 12 and 1 <= d <= _days_in_month(y, mo) and h <= 23 and mi <= 59
            and sec <= 59 and om <= 59 and oh * 60 + om <= _MAX_OFFSET_MIN):
        raise ValueError(f"invalid time {s!r}")
    offset_ms = (oh * 3600 + om * 60) * 1000
    if mt[9] == "-":
        offset_ms = -offset_ms
    days = _days_from_civil(y, mo, d)
    return days * _MS_PER_DAY + ((h * 60 + mi) * 60 + sec) * 1000 + frac_ms - offset_ms


def _float_ms_to_int(x: float) -> int:
    if not (_F_INT64_LO <= x < _F_INT64_HI):  # also rejects nan
        raise ValueError(f"time out of range: {x!r}")
    return math.floor(x)


def parse_time(x: Any) -> int:
    """Parse an event time or a ``time`` input to UTC epoch milliseconds.

    Accepts an ISO-8601 string (:data:`TIME_PATTERN`: date, or date and
    ``HH:MM[:SS[.fff…]]``; ``T``, ``t`` or a space between; ``Z`` or a
    ``±HH[:MM]`` offset up to ±18:00, none meaning UTC; fractions beyond
    milliseconds are truncated), an integer (epoch ms), a float (epoch ms, floored), or a numeric
    string (epoch ms, as the number it spells). Used for ``_time`` (SPEC §3.1),
    ``time`` inputs (§2.2) and ``Time(s)`` (§2.3).

    Args:
        x: the raw value.

    Returns:
        Epoch milliseconds (``int``).

    Raises:
        ValueError: not a valid time, or outside the 64-bit ms range.

    >>> parse_time("2013-01-01T10:17:00Z")
    1357035420000
    >>> parse_time("2013-01-01T12:17:00.5+02:00")
    1357035420500
    >>> parse_time(1357035420000.9)
    1357035420000
    """
    if isinstance(x, bool):
        raise ValueError("a boolean is not a time")
    if isinstance(x, int):
        if not INT64_MIN <= x <= INT64_MAX:
            raise ValueError(f"time out of range: {x!r}")
        return x
    if isinstance(x, float):
        return _float_ms_to_int(x)
    if isinstance(x, str):
        if _INTEGER_RE.fullmatch(x):
            return parse_time(int(x))
        if _NUMBER_RE.fullmatch(x):
            return _float_ms_to_int(float(x))
        return _parse_iso(x)
    raise ValueError(f"not a time: {x!r}")


def format_time(ms: int) -> str:
    """Format epoch milliseconds as ``YYYY-MM-DDTHH:MM:SS.mmmZ`` (SPEC §3.1, §3.5).

    Args:
        ms: UTC epoch milliseconds, within :data:`MIN_TIME_MS` …
            :data:`MAX_TIME_MS` (years 0000 to 9999).

    Returns:
        The ISO-8601 UTC string with milliseconds.

    Raises:
        ValueError: outside the printable range.

    >>> format_time(1357035420000)
    '2013-01-01T10:17:00.000Z'
    >>> format_time(-1)
    '1969-12-31T23:59:59.999Z'
    """
    if not MIN_TIME_MS <= ms <= MAX_TIME_MS:
        raise ValueError(f"time out of range: {ms!r}")
    days, ms_of_day = divmod(ms, _MS_PER_DAY)
    sec, milli = divmod(ms_of_day, 1000)
    mi, sec = divmod(sec, 60)
    h, mi = divmod(mi, 60)
    return f"{_date_text(days)}T{h:02d}:{mi:02d}:{sec:02d}.{milli:03d}Z"


@lru_cache(maxsize=4096)
def _date_text(days: int) -> str:
    """``YYYY-MM-DD`` of the UTC day ``days`` after 1970-01-01 (:func:`format_time`; kept per day: a served
    event formats its time and its time features' values, mostly within a few days).

    Source: H. Hinnant, "chrono-Compatible Low-Level Date Algorithms" (``civil_from_days``).
    """
    z = days + _EPOCH_SHIFT_DAYS + _DAYS_PER_400Y
    era = z // _DAYS_PER_400Y
    doe = z - era * _DAYS_PER_400Y
    yoe = (doe - doe // 1460 + doe // 36524 - doe // 146096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    d = doy - (153 * mp + 2) // 5 + 1
    m = mp + 3 if mp < 10 else mp - 9
    y = yoe + era * 400 - 400 + (m <= 2)
    return f"{y:04d}-{m:02d}-{d:02d}"


def format_float(x: float) -> str:
    """Format a float or duration as text: Python's ``repr`` (shortest round-trip digits).

    ``0.1`` -> ``"0.1"``, ``5.0`` -> ``"5.0"``, ``1e16`` -> ``"1e+16"``,
    ``1.5e-07``, ``inf``, ``-inf``, ``nan``, ``-0.0``. Scientific notation
    when the decimal exponent is < -4 or >= 16. The Spark engine
    (:func:`format_float_column`) lays out Java's ``Double.toString`` digits
    the same way and repairs Java 17's long digit strings for integral doubles
    in [1e16, 2^63); a few other doubles still print with different digits
    there (about 1 in 10^4 random bit patterns, e.g. ``8.41e+21``,
    ``1.9400994884341945e+25``, ``5e-324``), all still round-tripping.

    Args:
        x: the value.

    Returns:
        Its text.

    >>> format_float(1e16), format_float(0.0001), format_float(1e-05)
    ('1e+16', '0.0001', '1e-05')
    """
    return repr(float(x))


def _kind_name(raw: Any) -> str:
    if isinstance(raw, dict):
        return "an object"
    if isinstance(raw, list):
        return "an array"
    if isinstance(raw, bool):
        return "a boolean"
    if isinstance(raw, str):
        return f"the string {raw!r}"
    return repr(raw)


def _coerce_int_from_float(x: float, raw: Any) -> tuple[Any, str | None]:
    if not (_F_INT64_LO <= x < _F_INT64_HI):
        return None, f"cannot read {_kind_name(raw)} as int"
    n = int(x)  # truncates toward zero
    if n != x:
        return n, "loss of precision"
    return n, None


def coerce(raw: Any, type_name: str) -> tuple[Any, str | None]:
    """Coerce one raw JSON value to an input type (SPEC §2.2, module table).

    Args:
        raw: a parsed JSON value (``None``, ``bool``, ``int``, ``float``,
            ``str``, ``dict``, ``list``).
        type_name: one of :data:`INPUT_TYPES`.

    Returns:
        ``(value, error)``: the run-time value or ``None``, and an error
        message or ``None``. ``5.6`` as int gives ``(5, "loss of precision")``.

    Raises:
        ValueError: ``type_name`` is not an input type.

    >>> coerce("5", "int"), coerce(5.6, "int"), coerce("null", "int")
    ((5, None), (5, 'loss of precision'), (None, None))
    >>> coerce("bar", "int")
    (None, "cannot read the string 'bar' as int")
    """
    if raw is None or raw == "null":
        return None, None
    if isinstance(raw, (dict, list)):
        return None, f"cannot read {_kind_name(raw)} as {type_name}"
    if type_name == "bool":
        if isinstance(raw, bool):
            return raw, None
        if isinstance(raw, str):
            low = raw.lower()
            if low == "true":
                return True, None
            if low == "false":
                return False, None
        return None, f"cannot read {_kind_name(raw)} as bool"
    if type_name == "int":
        if isinstance(raw, bool):
            return None, "cannot read a boolean as int"
        if isinstance(raw, int):
            if INT64_MIN <= raw <= INT64_MAX:
                return raw, None
            return None, f"cannot read {raw!r} as int: out of range"
        if isinstance(raw, float):
            return _coerce_int_from_float(raw, raw)
        if isinstance(raw, str):
            if _INTEGER_RE.fullmatch(raw):
                n = int(raw)
                if INT64_MIN <= n <= INT64_MAX:
                    return n, None
                return None, f"cannot read {_kind_name(raw)} as int: out of range"
            if _NUMBER_RE.fullmatch(raw):
                return _coerce_int_from_float(float(raw), raw)
        return None, f"cannot read {_kind_name(raw)} as int"
    if type_name == "float":
        if isinstance(raw, bool):
            return None, "cannot read a boolean as float"
        if isinstance(raw, (int, float)):
            x = float(raw)
            if math.isnan(x):
                return None, "cannot read NaN as float"
            return x, None
        if isinstance(raw, str) and _NUMBER_RE.fullmatch(raw):
            return float(raw), None
        return None, f"cannot read {_kind_name(raw)} as float"
    if type_name == "string":
        if isinstance(raw, str):
            return raw, None
        if isinstance(raw, bool):
            return ("true" if raw else "false"), None
        if isinstance(raw, int):
            return str(raw), None
        if isinstance(raw, float):
            return format_float(raw), None
        return None, f"cannot read {_kind_name(raw)} as string"
    if type_name == "time":
        try:
            return parse_time(raw), None
        except ValueError:
            return None, f"cannot read {_kind_name(raw)} as time"
    raise ValueError(f"not an input type: {type_name!r}")


def read_input(payload: Any, spec: InputSpec, type_name: str) -> tuple[Any, str | None]:
    """Read and coerce one input feature from an event payload (SPEC §2.2).

    Missing or null (including the string ``"null"``): a default gives the
    default; an optional input gives ``None``; a required one gives ``None``
    and the error ``missing required input``. A value that fails coercion is
    ``None`` with an error even when optional or defaulted.

    Args:
        payload: the parsed event object.
        spec: the input's path and optionality (:class:`compiler.plan.InputSpec`).
        type_name: one of :data:`INPUT_TYPES`.

    Returns:
        ``(value, error)`` as in :func:`coerce`.
    """
    value, error = coerce(read_path(payload, spec.path), type_name)
    if value is None and error is None:
        if spec.has_default:
            return spec.default, None
        if not spec.optional:
            return None, "missing required input"
    return value, error


@lru_cache(maxsize=4096)
def parse_type(type_name: str) -> tuple[str, Any]:
    """Split a type name into its constructor and parameters.

    Args:
        type_name: a scalar name, ``array<T>``, ``tuple{T1,T2,…}`` (or
            ``tuple<…>``) or ``struct{a:T1,b:T2,…}`` (as in :mod:`compiler.functions`).

    Returns:
        ``("scalar", name)``, ``("array", T)``, ``("tuple", [T…])`` or
        ``("struct", [(field, T)…])``.

    Raises:
        ValueError: malformed.

    >>> parse_type("struct{a:int,b:array<time>}")
    ('struct', [('a', 'int'), ('b', 'array<time>')])
    """
    t = type_name.strip()
    if t.startswith("array<") and t.endswith(">"):
        return "array", t[6:-1].strip()
    if (t.startswith("tuple<") and t.endswith(">")) or (t.startswith("tuple{") and t.endswith("}")):
        return "tuple", _split_top(t[6:-1])
    if t.startswith("struct{") and t.endswith("}"):
        fields = []
        for part in _split_top(t[7:-1]):
            name, sep, ftype = part.partition(":")
            if not sep:
                raise ValueError(f"malformed struct type {type_name!r}")
            fields.append((name.strip(), ftype.strip()))
        return "struct", fields
    if any(c in t for c in "<>{},:"):
        raise ValueError(f"malformed type {type_name!r}")
    return "scalar", t


def _split_top(s: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, c in enumerate(s):
        if c in "<{":
            depth += 1
        elif c in ">}":
            depth -= 1
        elif c == "," and depth == 0:
            parts.append(s[start:i].strip())
            start = i + 1
    if s.strip():
        parts.append(s[start:].strip())
    return parts


def to_json_value(value: Any, type_name: str) -> Any:
    """Encode a run-time value for a JSON response (SPEC §3.1, §3.5).

    ``time`` -> ISO string (:func:`format_time`; out of the printable range ->
    ``None``); ``duration``/``float`` -> float (non-finite -> ``None``, JSON
    has no NaN/Infinity); ``int`` stays an exact int; ``struct{…}`` -> object
    keyed by field name; ``array<T>`` / ``tuple{…}`` -> list, recursively.

    Args:
        value: the run-time value (``None`` allowed anywhere).
        type_name: its type name (see :func:`parse_type`).

    Returns:
        A value ``orjson`` can encode.

    >>> to_json_value(1357035420000, "time")
    '2013-01-01T10:17:00.000Z'
    >>> to_json_value([{"t": 0, "n": 2}], "array<struct{t:time,n:int}>")
    [{'t': '1970-01-01T00:00:00.000Z', 'n': 2}]
    >>> to_json_value([[0, 1.5]], "array<tuple{time,duration}>")
    [['1970-01-01T00:00:00.000Z', 1.5]]
    """
    if value is None:
        return None
    kind, param = parse_type(type_name)
    if kind == "scalar":
        if param == "time":
            return _time_json(value)
        if param in ("float", "duration"):
            return _float_json(value)
        return value
    if kind == "array":
        return [to_json_value(v, param) for v in value]
    if kind == "tuple":
        return [to_json_value(v, t) for v, t in zip(value, param)]
    return {name: to_json_value(value.get(name), t) for name, t in param}


def _time_json(value: Any) -> Any:
    """A ``time`` value's JSON form (:func:`to_json_value`): ISO text, ``None`` out of the printable range."""
    try:
        return format_time(value)
    except ValueError:
        return None


def _float_json(value: Any) -> Any:
    """A ``float``/``duration`` value's JSON form (:func:`to_json_value`): a float, ``None`` if not finite."""
    x = float(value)
    return x if math.isfinite(x) else None


@lru_cache(maxsize=4096)
def json_encoder(type_name: str) -> Callable[[Any], Any] | None:
    """The encoder of one type's non-null values for a JSON response: :func:`to_json_value` chosen once per type.

    For a response's every feature (serving's hot path), where
    :func:`to_json_value` parses the type name and branches at each value.

    Args:
        type_name: a type name (see :func:`parse_type`).

    Returns:
        ``None`` where a value is its own JSON form (``int``, ``str``,
        ``bool`` and the other scalars :func:`to_json_value` returns as they
        are), else ``value -> to_json_value(value, type_name)`` for a value
        that is not ``None`` (callers pass ``None`` through).

    >>> json_encoder("int") is None, json_encoder("time")(0)
    (True, '1970-01-01T00:00:00.000Z')
    """
    kind, param = parse_type(type_name)
    if kind == "scalar":
        if param == "time":
            return _time_json
        if param in ("float", "duration"):
            return _float_json
        return None
    return lambda value: to_json_value(value, type_name)


# ---------------------------------------------------------------------- Spark
def spark_type(type_name: str) -> str:
    """Return the Spark SQL DDL type of a scalar type (:data:`SPARK_TYPES`).

    Raises:
        ValueError: not a scalar type.
    """
    try:
        return SPARK_TYPES[type_name]
    except KeyError:
        raise ValueError(f"not a scalar type: {type_name!r}") from None


def json_path(path: tuple[str | int, ...]) -> str:
    """Render a path as a Spark JSON path (``$.a['b.c'][0]``).

    Raises:
        ValueError: a key Spark's path syntax cannot express (empty, ``*``,
            or holding ``'`` together with ``.``/``[``/``]``), or a negative index.
    """
    out = "$"
    for step in path:
        if isinstance(step, int):
            if step < 0:
                raise ValueError(f"negative index {step} in path")
            out += f"[{step}]"
        elif step and step != "*" and not any(c in step for c in ".[]'\"") and not step[0].isspace():
            out += f".{step}"
        elif step and step != "*" and "'" not in step:
            out += f"['{step}']"
        else:
            raise ValueError(f"JSON key {step!r} cannot be addressed in Spark")
    return out


def _functions():
    from pyspark.sql import functions as F

    return F


def _flag(cond: Column) -> Column:
    """A never-null boolean: null counts as false."""
    F = _functions()
    return F.coalesce(cond, F.lit(False))


def let(fn: Callable[..., Column], *cols: Column) -> Column:
    """Evaluate ``fn`` over ``cols`` bound once, like ``let v = col in fn(v)``.

    Column expressions are trees: a helper that uses its input ten times
    copies the input's whole expression ten times, and nesting multiplies.
    Binding the inputs to lambda variables of a one-element ``transform``
    (a built-in higher-order function, not a UDF) keeps plans linear in the
    source expression. On 2M rows it ran about as fast as the copied form
    (``String(x * 2.0)``: 11.2 s vs 10.3 s; ``Time(Lower(s))``: 15.8 s vs 19.5 s).

    Args:
        fn: builds the result from one lambda-variable column per input.
        cols: the inputs.

    Returns:
        ``fn(*cols)`` as one column.
    """
    F = _functions()
    if len(cols) == 1:
        return F.transform(F.array(cols[0]), lambda v: fn(v)).getItem(0)
    packed = F.array(F.struct(*[c.alias(f"_{i}") for i, c in enumerate(cols)]))
    return F.transform(packed, lambda v: fn(*[v.getField(f"_{i}") for i in range(len(cols))])).getItem(0)


def _double_to_long(x: Column, *, floor: bool) -> tuple[Column, Column]:
    """Floor/truncate a double to long; ``(value, ok)``, never throws (ANSI-safe)."""
    F = _functions()
    ok = _flag((x >= F.lit(_F_INT64_LO)) & (x < F.lit(_F_INT64_HI)))
    safe = F.when(ok, x).otherwise(F.lit(0.0))
    value = F.floor(safe) if floor else safe.cast("long")
    return F.when(ok, value.cast("long")), ok


_SPARK_TS_FORMAT = "yyyy-MM-dd[ HH:mm[:ss[.SSSSSSSSS]]]XXX"
_NTZ_EPOCH = "1970-01-01 00:00:00"
_J_OFFSET_END = r":[0-9]{2}(?:[.][0-9]+)?[+-][0-9]{2}"


def _parse_iso_column(s: Column) -> Column:
    """ISO text -> epoch ms (null when invalid).

    :data:`TIME_PATTERN` is checked with ``rlike``; the text is then respelt
    ``yyyy-MM-dd[ HH:mm[:ss[.fffffffff]]]±HH:MM`` (``T`` -> space, ``,`` ->
    ``.``, ``Z``/none -> ``+00:00``, ``±HH``/``±HHMM`` -> ``±HH:MM``) and
    parsed by ``try_to_timestamp``, which rejects impossible dates and times.
    The explicit offset makes the result independent of the session time
    zone; ``unix_millis`` truncates sub-millisecond digits.
    """
    F = _functions()
    x = F.regexp_replace(s, r"^([0-9]{4}-[0-9]{2}-[0-9]{2})[Tt]", "$1 ")
    x = F.regexp_replace(x, ",", ".")
    x = F.regexp_replace(x, "[Zz]$", "+00:00")
    x = F.regexp_replace(x, "(" + _J_OFFSET_END + ")$", "$1:00")
    x = F.regexp_replace(x, "(" + _J_OFFSET_END + ")([0-9]{2})$", "$1:$2")
    x = F.when(x.rlike(_J_OFFSET_END + ":[0-9]{2}$"), x).otherwise(F.concat(x, F.lit("+00:00")))
    ts = F.try_to_timestamp(F.when(_flag(s.rlike(_J_TIME)), x), F.lit(_SPARK_TS_FORMAT))
    return F.unix_millis(ts)


#: the canonical event-time text ``YYYY-MM-DDTHH:MM:SS.mmmZ`` (years 1900-2099), parsed by one
#: ``try_cast`` to timestamp before the number tests and the general ISO rules (:func:`_parse_iso_column`), which decide
#: whatever it leaves null
_J_CANONICAL = r"^(19|20)[0-9]{2}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}[.][0-9]{3}Z\z"


def _parse_time_text(text: Column) -> Column:
    F = _functions()
    is_int = _flag(text.rlike(_J_INTEGER))
    is_num = _flag(text.rlike(_J_NUMBER))
    # every try_cast below parses only the texts of its own branch (a guarded input, null elsewhere): a
    # branch's subexpressions are evaluated for every row once Spark hoists them, and a try_cast of a
    # text that is not a number costs microseconds (the failed parse)
    as_float, _ok = _double_to_long(F.when(is_num, text).try_cast("double"), floor=True)
    # The common case first, before the number tests: a canonical UTC text is one regex and one
    # cast (Spark's own ISO parser, about 3x a formatter's speed; the explicit Z makes it
    # independent of the session time zone, an impossible date is null). A canonical text is no
    # number, so whatever it leaves null falls to the general rules unchanged.
    canonical = F.when(_flag(text.rlike(_J_CANONICAL)), F.unix_millis(text.try_cast("timestamp")))
    return F.coalesce(canonical, F.when(is_int, text.try_cast("long")).when(is_num, as_float)
                      .otherwise(_parse_iso_column(text)))


def parse_time_column(text: Column, *, bind: bool = True) -> Column:
    """Spark twin of :func:`parse_time` for a string column.

    Args:
        text: a ``StringType`` column (null allowed).
        bind: evaluate ``text`` once through :func:`let` (pass ``False`` when
            it is a plain column reference).

    Returns:
        ``LongType`` epoch ms; null when ``text`` is null or invalid (so the
        text was invalid exactly where it is non-null and the result null).
    """
    if not bind:
        return _parse_time_text(text)
    # the common case, a canonical UTC text, outside the lambda of let (a higher-order function is
    # evaluated row by row, without generated code); what it leaves null takes the general rules, whose
    # first test is the same one
    F = _functions()
    canonical = F.when(_flag(text.rlike(_J_CANONICAL)), F.unix_millis(text.try_cast("timestamp")))
    return F.coalesce(canonical, let(_parse_time_text, text))


def time_column(raw: Column) -> Column:
    """The event time ``_time`` as ``LongType`` epoch ms (SPEC §3.1).

    Args:
        raw: a column holding an ISO-8601 string, epoch ms as a number, or a
            numeric string (any type castable to string).

    Returns:
        ``LongType`` ms; null when null or unparseable (same rules as
        :func:`parse_time`).
    """
    return parse_time_column(raw.cast("string"))


def format_time_column(ms: Column) -> Column:
    """Spark twin of :func:`format_time` (``YYYY-MM-DDTHH:MM:SS.mmmZ``), session-time-zone free.

    Formats a ``TIMESTAMP_NTZ`` (epoch + ms), so the session time zone never applies.

    Args:
        ms: ``LongType`` epoch ms.

    Returns:
        The ISO string; null when ``ms`` is null or outside years 0000-9999.
    """
    F = _functions()
    ok = _flag((ms >= F.lit(MIN_TIME_MS)) & (ms <= F.lit(MAX_TIME_MS)))
    safe = F.when(ok, ms).otherwise(F.lit(0).cast("long"))
    local = F.timestamp_add("MILLISECOND", safe, F.lit(_NTZ_EPOCH).cast("timestamp_ntz"))
    text = F.date_format(local, "yyyy-MM-dd'T'HH:mm:ss.SSS'Z'")
    return F.when(ok, text)


def _format_float_body(x: Column) -> Column:
    F = _functions()
    s = x.cast("string")
    a = F.abs(x)
    sci = (a >= F.lit(1e16)) | ((a < F.lit(1e-4)) & (a != F.lit(0.0)))
    dec = F.when(sci, F.lit(0.0)).otherwise(x).cast("decimal(38,22)").cast("string")
    fixed = F.regexp_replace(F.regexp_replace(dec, "0+$", ""), r"\.$", ".0")
    e = F.regexp_replace(s, r"\.0E", "E")
    e = F.regexp_replace(e, r"E-([0-9])$", "e-0$1")
    e = F.regexp_replace(e, r"E([0-9])$", "e+0$1")
    e = F.regexp_replace(e, "E-", "e-")
    sci_text = F.regexp_replace(e, "E", "e+")
    big = (a >= F.lit(1e16)) & (a < F.lit(_F_INT64_HI))
    # double -> long is exact for these integral values (double -> decimal would use Java's digits)
    n = F.when(big, a).otherwise(F.lit(1e16)).cast("long").cast("decimal(20,0)")
    # Shortest digits: a value with <= 12 digits is exactly representable here, so
    # rounding at 10^10 or finer finds it; take the coarsest rounding that converts back.
    # One fold over the powers of ten (round(n / 10^p) * 10^p, half up as round(n, -p)):
    # the expression holds one rounding step, not eleven nested ones (which made this
    # formatter most of the input coercion's analysis and optimisation time).
    pows = F.array(*[F.lit(10 ** p).cast("decimal(11,0)") for p in range(11)])

    def coarser(acc: Column, pw: Column) -> Column:
        cand = (F.round(n / pw, 0) * pw).cast("decimal(20,0)")
        return F.when(cand.cast("double") == a, cand).otherwise(acc)

    pick = F.aggregate(pows, n, coarser)
    t = pick.cast("string")
    for digits in (16, 17, 18):
        t = F.regexp_replace(t, f"^([0-9])([0-9]{{{digits}}})$", f"$1.$2e+{digits}")
    t = F.regexp_replace(F.regexp_replace(t, "0+e", "e"), r"\.e", "e")
    big_text = F.concat(F.when(x < 0, F.lit("-")).otherwise(F.lit("")), t)
    return (F.when(s == "NaN", F.lit("nan"))
            .when(s == "Infinity", F.lit("inf"))
            .when(s == "-Infinity", F.lit("-inf"))
            .when(s == "-0.0", F.lit("-0.0"))
            .when(x == 0, F.lit("0.0"))
            .when(big, big_text)
            .when(sci, sci_text)
            .otherwise(fixed))


def format_float_column(x: Column, *, bind: bool = True) -> Column:
    """Spark twin of :func:`format_float`: Python ``repr`` text of a double.

    * fixed notation (1e-4 <= |x| < 1e16): ``cast(x as decimal(38,22))``
      -- whose digits are Java's ``Double.toString`` digits -- with trailing
      zeros dropped (``100.0``, ``0.0001``); ``0.0`` and ``-0.0`` as such;
    * scientific: Java's ``d.dddE±n`` re-spelt ``d.ddde±nn``;
    * integral doubles in [1e16, 2^63), where Java 17 prints every digit of the
      integer (``2.82879384806159008E17``), are rounded to the coarsest power
      of ten that still converts back to the same double (the shortest digits);
    * ``inf``, ``-inf``, ``nan``.

    Args:
        x: ``DoubleType`` column.
        bind: evaluate ``x`` once through :func:`let` (pass ``False`` when it
            is a plain column reference).

    Returns:
        ``StringType`` column (null for null).
    """
    return let(_format_float_body, x) if bind else _format_float_body(x)


def _number_to_long(text: Column, via_double: Column) -> tuple[Column, Column, Column]:
    """int coercion of a text: ``(value, lossy, ok)`` (see :func:`coerce`)."""
    F = _functions()
    is_int = _flag(text.rlike(_J_INTEGER)) & ~via_double
    is_num = _flag(text.rlike(_J_NUMBER))
    exact = F.when(is_int, text).try_cast("long")  # guarded: see _parse_time_text
    dbl = F.when(is_num, text).try_cast("double")
    trunc, in_range = _double_to_long(dbl, floor=False)
    value = F.when(is_int, exact).when(is_num, trunc)
    ok = F.when(is_int, exact.isNotNull()).when(is_num, in_range).otherwise(F.lit(False))
    lossy = _flag(~is_int & is_num & in_range & (trunc.cast("double") != dbl))
    return value, lossy, _flag(ok)


def _raw_token_text(raw_text: Column, path: tuple[str | int, ...]) -> Column:
    """The JSON text of the token at ``path`` of the raw event text (``from_json`` to a string leaf).

    A repeated key reads as its last value, as the API's orjson reads it; a
    number's text keeps its sign where ``parse_json`` does not (it stores
    ``-0.0`` as the DECIMAL 0). Null when the path is empty or not found.
    """
    F = _functions()
    if not path:
        return F.lit(None).cast("string")
    ddl = "string"
    for step in reversed(path):
        ddl = f"array<{ddl}>" if isinstance(step, int) else f"struct<`{step.replace('`', '``')}`: {ddl}>"
    col = F.from_json(raw_text, ddl)
    for step in path:
        col = col.getItem(step) if isinstance(step, int) else col.getField(step)
    return col


def _signed_zero(kind: Column, text: Column, value: Column, type_name: str, raw_token: Column | None) -> Column:
    """``value``, or the negative zero of a JSON ``-0.0`` token read as ``float`` or ``string`` (Python's).

    ``parse_json`` stores ``-0.0`` as the DECIMAL 0 (its sign lost); orjson
    reads it as the float ``-0.0``, whose text is ``'-0.0'``. The raw token's
    text (``raw_token``, looked up only for a DECIMAL zero) gives the sign back.
    """
    F = _functions()
    if raw_token is None or type_name not in ("float", "string"):
        return value
    zero = _flag(kind.startswith("DECIMAL")) & _flag(text.try_cast("double") == F.lit(0.0))
    negative = F.lit(-0.0) if type_name == "float" else F.lit("-0.0")
    return F.when(zero & _flag(raw_token.startswith("-")), negative).otherwise(value)


def _input_body(kind: Column, text: Column, spec: InputSpec, type_name: str,
                raw_token: Column | None = None) -> tuple[Column, Column]:
    F = _functions()
    is_null = _flag(kind.isNull() | (kind == "VOID") | (text == "null"))
    composite = _flag(kind.startswith("OBJECT") | kind.startswith("ARRAY"))
    # DECIMAL / DOUBLE tokens are JSON floats (or integers beyond 64 bits): Python
    # holds them as floats, so numeric conversions go through a double.
    via_double = _flag(kind.startswith("DECIMAL") | kind.startswith("DOUBLE") | kind.startswith("FLOAT"))
    lossy = F.lit(False)
    if type_name == "bool":
        low = F.lower(text)
        value = F.when(low == "true", F.lit(True)).when(low == "false", F.lit(False))
        bad = value.isNull()
    elif type_name == "int":
        value, lossy, ok = _number_to_long(text, via_double)
        bad = ~ok | lossy
    elif type_name == "float":
        value = F.when(_flag(text.rlike(_J_NUMBER)), text.try_cast("double"))
        bad = value.isNull()
    elif type_name == "string":
        int_digits = _flag(kind.rlike(r"^DECIMAL\((19|[2-9][0-9]|1[0-9][0-9]),0\)$"))
        # the float's digits only for numeric tokens: inside a lambda (let), so that Spark cannot hoist the
        # formatting's many subexpressions out of the branch and evaluate them for every string
        as_float = let(_format_float_body, text.try_cast("double"))
        value = F.when(via_double & ~int_digits, as_float).otherwise(text)
        bad = F.lit(False)
    else:  # time
        as_double, _ok = _double_to_long(F.when(via_double, text).try_cast("double"), floor=True)
        value = F.when(via_double, as_double).otherwise(_parse_time_text(text))
        bad = value.isNull()
    error = _flag(composite | bad) & ~is_null
    value = F.when(is_null | composite | (error & ~lossy), F.lit(None)).otherwise(value)
    value = value.cast(SPARK_TYPES[type_name])
    if spec.has_default:
        value = F.when(is_null, F.lit(spec.default).cast(SPARK_TYPES[type_name])).otherwise(value)
    elif not spec.optional:
        error = error | is_null
    fast = _common_token(kind, text, type_name)
    if fast is None:
        return _signed_zero(kind, text, value, type_name, raw_token), error
    # the token kind an input usually has first: one comparison and (at most) one cast, and the
    # general rules above only for the other rows (a CASE branch's own subexpressions run only
    # for its rows)
    ok, typed = fast
    value = F.when(ok, typed).otherwise(value)
    return _signed_zero(kind, text, value, type_name, raw_token), F.when(ok, F.lit(False)).otherwise(error)


#: ``schema_of_variant`` names of JSON integer tokens that fit 64 bits
_INT_KINDS = ("TINYINT", "SMALLINT", "INT", "BIGINT")


def _common_token(kind: Column, text: Column, type_name: str) -> tuple[Column, Column] | None:
    """The common token kind of an input type and its value by the shortest route, or ``None``.

    ``(ok, value)``: ``ok`` is a never-null condition on the token's kind
    under which :func:`_input_body`'s general rules give ``value`` with no
    error, computed here without them: a JSON string for a ``string``
    input (not the text ``null``, which reads as missing); a JSON number
    that is a decimal or a 64-bit integer for a ``float`` input (its text,
    a plain or scientific decimal numeral, always matches the JSON number
    pattern, and is parsed by the same cast); a 64-bit integer for an
    ``int`` input (exact, as ``_number_to_long``'s integer branch); a
    JSON boolean for a ``bool`` input. ``time`` has its own fast path for
    canonical texts (``_parse_time_text``).
    """
    F = _functions()
    if type_name == "string":
        return _flag((kind == "STRING") & (text != "null")), text
    if type_name == "float":
        return _flag(kind.startswith("DECIMAL") | kind.isin(*_INT_KINDS)), text.try_cast("double")
    if type_name == "int":
        exact = F.when(kind.isin(*_INT_KINDS), text).try_cast("long")
        return _flag(exact.isNotNull()), exact
    if type_name == "bool":
        return _flag(kind == "BOOLEAN"), text == F.lit("true")
    return None


#: ``schema_of_variant`` kinds whose ``to_json`` text is ``variant_get(.., 'string')``'s (a double's
#: ``Infinity`` once its quotes are dropped): :func:`variant_token`
_TO_JSON_KINDS = ("BOOLEAN", "DOUBLE", *_INT_KINDS)


def variant_token(variant: Column, path: tuple[str | int, ...]) -> tuple[Column, Column]:
    """The kind and text of the JSON token at ``path`` of a parsed payload, to compute once per row.

    ``kind`` is ``schema_of_variant`` of the token (``BIGINT``,
    ``DECIMAL(p,s)``, ``DOUBLE``, ``BOOLEAN``, ``STRING``, ``OBJECT<..>``,
    ``ARRAY<..>``, ``VOID`` for JSON null; null when the path is not
    found), ``text`` the text ``try_variant_get(.., 'string')`` gives.

    Spark 4.3's ``variant_get`` of a scalar, to any type, builds a
    ``Literal`` and a ``Cast`` expression for every row and evaluates it
    (``VariantGet.cast``; 35% of a replay's input parsing by JFR samples,
    2026-11-30). For a number or a boolean, ``to_json`` of the token writes
    the same text with no expression (a long's digits, a decimal's plain
    digits, ``Double.toString``, ``true``/``false``; a double's infinity
    quoted, so quotes are dropped); strings keep ``variant_get`` (``to_json``
    would wrap each in a Jackson generator to escape it: dearer than the
    ``Cast``), as do objects, arrays and JSON null. Equal on thousands of
    generated tokens (``tests/conformance/test_coercion.py``). Select both
    columns in a projection of their own and pass them to
    :func:`input_column_with_error` as ``token``: the input rules read the
    text several times, and copying its ``CASE`` into each use cost more
    than the ``Cast`` saved.

    Args:
        variant: a ``VARIANT`` column (``try_parse_json`` of a payload, or a part of it).
        path: the token's path in it (empty: the variant itself).

    Returns:
        ``(kind, text)``, two string columns.

    Raises:
        ValueError: a path Spark cannot express (:func:`json_path`).
    """
    F = _functions()
    at = json_path(path)
    token = variant if not path else F.try_variant_get(variant, at, "variant")
    kind = F.schema_of_variant(token)
    by_json = _flag(kind.isin(*_TO_JSON_KINDS) | kind.startswith("DECIMAL"))
    text = F.when(by_json, F.translate(F.to_json(token), '"', "")).otherwise(F.try_variant_get(variant, at, "string"))
    return kind, text


def input_column_with_error(
    raw_json: Column | None, spec: InputSpec, type_name: str, parsed: bool = False,
    raw_text: Column | None = None, token: tuple[Column, Column] | None = None,
) -> tuple[Column, Column]:
    """Spark twin of :func:`read_input`: the typed value and an error flag.

    The payload is parsed with ``try_parse_json`` (a VARIANT; malformed JSON
    reads as missing), and the token's kind (``schema_of_variant``) and text
    come from :func:`variant_token`, so strings, numbers, booleans and
    objects are told apart exactly as Python sees them.

    Args:
        raw_json: ``StringType`` column with the event's raw JSON text, or,
            with ``parsed``, a ``VARIANT`` column from ``try_parse_json`` of it
            (the writer parses each event once for all of its inputs).
        spec: the input (path, optional, default); an empty path reads
            ``raw_json`` itself.
        type_name: one of :data:`INPUT_TYPES`.
        parsed: ``raw_json`` is already parsed.
        raw_text: with ``parsed`` or ``token``, the event's raw JSON text: a
            JSON ``-0.0`` at ``spec.path`` then reads as ``-0.0`` (``'-0.0'``
            as a string), as in Python, where the parse alone reads 0.
            Without either, ``raw_json`` is the text.
        token: the ``(kind, text)`` columns of the payload's token at
            ``spec.path``, from :func:`variant_token` (then ``raw_json`` is
            not read and may be ``None``).

    Returns:
        ``(value, error)``: value typed per :data:`SPARK_TYPES` (null on
        error, except the lossy int case, e.g. ``5.6`` -> 5), and a never-null
        boolean, true where :func:`read_input` reports an error.

    Raises:
        ValueError: unknown type or a path Spark cannot express.
    """
    F = _functions()
    if type_name not in INPUT_TYPES:
        raise ValueError(f"not an input type: {type_name!r}")
    json_path(spec.path)  # raises for a path Spark cannot express
    # without token (the tests' path lookups), each use of the text copies its expression: the writer
    # passes token columns (writer.features.input_columns)
    kind, text = token if token is not None else variant_token(raw_json if parsed else F.try_parse_json(raw_json),
                                                               spec.path)
    if parsed or token is not None:
        raw_token = None if raw_text is None else _raw_token_text(raw_text, spec.path)
    else:
        raw_token = _raw_token_text(raw_json, spec.path)
    return _input_body(kind, text, spec, type_name, raw_token)


def input_column(raw_json: Column | None, spec: InputSpec, type_name: str, parsed: bool = False,
                 raw_text: Column | None = None, token: tuple[Column, Column] | None = None) -> Column:
    """The typed value of one input feature read from the raw event JSON (Spark).

    Same results as :func:`read_input` with errors as null, except the lossy
    int case keeps its value (``5.6`` as int is 5, SPEC §3.5).

    Args:
        raw_json: ``StringType`` column with the event's raw JSON text (or
            its ``VARIANT`` parse, with ``parsed``).
        spec: the input (path, optional, default).
        type_name: one of :data:`INPUT_TYPES`.
        parsed: ``raw_json`` is already parsed (see :func:`input_column_with_error`).
        raw_text, token: see :func:`input_column_with_error`.

    Returns:
        Column typed per :data:`SPARK_TYPES`.
    """
    value, _ = input_column_with_error(raw_json, spec, type_name, parsed, raw_text, token)
    return value
