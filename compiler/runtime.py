"""Null-aware helpers called by generated Python expression code (SPEC §2.3, §5.10).

:mod:`compiler.codegen.python` inlines the common operators and calls these
for the rest (in the manner of sqlglot's ``executor/env.py``). Every helper
takes non-null arguments (the generated code checks nulls first, so null
propagation costs one ``is None`` test) and raises :class:`EvalError` for an
evaluation error, which makes the whole feature null with an error (§3.5).
The Spark twins live in :mod:`compiler.codegen.spark`; the conformance table
(``tests/conformance``) holds the two to the same results.

Values: int is a Python ``int`` kept in the 64-bit range (overflow is an
error), float a ``float`` never NaN (a NaN result is an error), time ``int``
epoch ms, duration ``float`` seconds.
"""

from __future__ import annotations

import math
from typing import Any, NoReturn

from compiler import typesystem
from compiler.typesystem import INT64_MAX, INT64_MIN

_F_INT64_LO = -9.223372036854775808e18
_F_INT64_HI = 9.223372036854775808e18


class EvalError(Exception):
    """An evaluation error: the feature is null and ``message`` goes to ``errors`` (SPEC §3.5).

    Attributes:
        message: human-readable reason, e.g. ``"division by zero"``.
    """

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def fail(message: str) -> NoReturn:
    """Raise :class:`EvalError` (used from generated code).

    Raises:
        EvalError: always.
    """
    raise EvalError(message)


def check_int(n: int) -> int:
    """Return ``n`` if it fits in 64 bits.

    Raises:
        EvalError: ``integer overflow``.
    """
    if INT64_MIN <= n <= INT64_MAX:
        return n
    raise EvalError("integer overflow")


def check_float(x: float) -> float:
    """Return ``x`` unless it is NaN (NaN is never a value, so comparisons agree across engines).

    Raises:
        EvalError: ``result is not a number``.
    """
    if math.isnan(x):
        raise EvalError("result is not a number")
    return x


def div(a: float, b: float) -> float:
    """``a / b`` on floats (``/`` always gives float, SPEC §2.3).

    Raises:
        EvalError: ``division by zero``; NaN result.
    """
    if b == 0:
        raise EvalError("division by zero")
    return check_float(a / b)


def floordiv_int(a: int, b: int) -> int:
    """``a // b`` on ints: floor division, as Python.

    Raises:
        EvalError: ``division by zero``; ``integer overflow`` (``INT64_MIN // -1``).
    """
    if b == 0:
        raise EvalError("division by zero")
    return check_int(a // b)


def floordiv_float(a: float, b: float) -> float:
    """``a // b`` with a float operand: ``floor(a / b)`` as a float.

    This is the floor of the rounded quotient (Spark can only compute that),
    which differs from Python's float ``//`` in rare rounding cases
    (``1 // 0.1`` is ``10.0`` here, ``9.0`` in Python). Infinite quotients stay
    infinite.

    Raises:
        EvalError: ``division by zero``; NaN result.
    """
    if b == 0:
        raise EvalError("division by zero")
    q = check_float(a / b)
    if _F_INT64_LO <= q < _F_INT64_HI:
        return float(math.floor(q))
    return q  # already integral, or infinite


def mod_int(a: int, b: int) -> int:
    """``a % b`` on ints with Python's sign rule (the result has the divisor's sign).

    Raises:
        EvalError: ``division by zero``.
    """
    if b == 0:
        raise EvalError("division by zero")
    return a % b


def mod_float(a: float, b: float) -> float:
    """``a % b`` with a float operand, Python's rule (``fmod`` then shifted to the divisor's sign).

    Raises:
        EvalError: ``division by zero``; NaN result (e.g. ``inf % 2``).
    """
    if b == 0:
        raise EvalError("division by zero")
    return check_float(a % b)


def shl(a: int, b: int) -> int:
    """``a << b``; a negative count or a result outside 64 bits is an error.

    Raises:
        EvalError: ``negative shift count``; ``integer overflow``.
    """
    if b < 0:
        raise EvalError("negative shift count")
    if a == 0:
        return 0
    if b >= 64:
        raise EvalError("integer overflow")
    return check_int(a << b)


def shr(a: int, b: int) -> int:
    """``a >> b`` (arithmetic); counts above 63 act as 63.

    Raises:
        EvalError: ``negative shift count``.
    """
    if b < 0:
        raise EvalError("negative shift count")
    return a >> min(b, 63)


def ms_shift(d: float) -> int:
    """Milliseconds a duration moves a time: ``floor(d * 1000 + 0.5)`` (d in seconds).

    Raises:
        EvalError: non-finite or beyond 64 bits.
    """
    x = d * 1000.0 + 0.5
    if not (_F_INT64_LO <= x < _F_INT64_HI):
        raise EvalError("duration out of range")
    return math.floor(x)


def time_add(t: int, d: float) -> int:
    """``time + duration`` -> time: ``t + floor(d*1000 + 0.5)`` ms.

    Raises:
        EvalError: out of range.
    """
    return check_int(t + ms_shift(d))


def time_sub(t: int, d: float) -> int:
    """``time - duration`` -> time: ``t - floor(d*1000 + 0.5)`` ms.

    Raises:
        EvalError: out of range.
    """
    return check_int(t - ms_shift(d))


def time_diff(a: int, b: int) -> float:
    """``time - time`` -> duration seconds: ``(a - b) / 1000.0``.

    Raises:
        EvalError: ``integer overflow``.
    """
    return check_int(a - b) / 1000.0


def from_unix_seconds_float(x: float) -> int:
    """``FromUnixSeconds`` of a float: ``floor(x * 1000)`` ms.

    Raises:
        EvalError: non-finite or out of range.
    """
    y = x * 1000.0
    if not (_F_INT64_LO <= y < _F_INT64_HI):
        raise EvalError("time out of range")
    return math.floor(y)


def time_of(x: Any) -> int:
    """``Time(x)`` / ``ParseTime(x)`` of a string or number (:func:`compiler.typesystem.parse_time`).

    Raises:
        EvalError: ``invalid time``.
    """
    try:
        return typesystem.parse_time(x)
    except ValueError:
        raise EvalError(f"invalid time {x!r}") from None


def int_of_float(x: float) -> int:
    """``Int(x)`` of a float: truncation toward zero.

    Raises:
        EvalError: NaN, infinite or outside 64 bits.
    """
    if _F_INT64_LO <= x < _F_INT64_HI:
        return int(x)
    raise EvalError(f"cannot convert {x!r} to int")


def int_of_string(s: str) -> int:
    """``Int(s)``: an integer string exactly; another numeric string truncated toward zero.

    Raises:
        EvalError: not numeric or out of range.
    """
    if typesystem._INTEGER_RE.fullmatch(s):
        n = int(s)
        if INT64_MIN <= n <= INT64_MAX:
            return n
    elif typesystem._NUMBER_RE.fullmatch(s):
        x = float(s)
        if _F_INT64_LO <= x < _F_INT64_HI:
            return int(x)
    raise EvalError(f"cannot convert {s!r} to int")


def float_of_string(s: str) -> float:
    """``Float(s)`` of a numeric string (:data:`compiler.typesystem.NUMBER_PATTERN`).

    Raises:
        EvalError: not numeric.
    """
    if typesystem._NUMBER_RE.fullmatch(s):
        return float(s)
    raise EvalError(f"cannot convert {s!r} to float")


def bool_of_string(s: str) -> bool:
    """``Bool(s)``: ``"true"``/``"false"``, any case.

    Raises:
        EvalError: anything else.
    """
    low = s.lower()
    if low == "true":
        return True
    if low == "false":
        return False
    raise EvalError(f"cannot convert {s!r} to bool")


def string_of_time(ms: int) -> str:
    """``String(t)``: ``YYYY-MM-DDTHH:MM:SS.mmmZ``.

    Raises:
        EvalError: outside years 0000-9999.
    """
    try:
        return typesystem.format_time(ms)
    except ValueError:
        raise EvalError("time out of range") from None


string_of_float = typesystem.format_float


def in_list(needle: Any, values: tuple[Any, ...]) -> bool | None:
    """SQL ``needle IN (values…)`` for a non-null needle: true if found, else null if any value is null, else false."""
    if needle in values:
        return True
    if None in values:
        return None
    return False
