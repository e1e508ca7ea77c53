"""Value comparison shared by the conformance tests (floats within 1e-9 relative, SPEC §3.3)."""

from __future__ import annotations

import math
from typing import Any


def same(actual: Any, expected: Any) -> bool:
    """Whether ``actual`` equals ``expected`` with the same run-time type (bool is not int)."""
    if expected is None or actual is None:
        return expected is None and actual is None
    if isinstance(expected, bool) or isinstance(actual, bool):
        return actual is expected
    if isinstance(expected, float):
        if not isinstance(actual, float):
            return False
        if math.isinf(expected) or math.isinf(actual):
            return actual == expected
        return actual == expected or abs(actual - expected) <= 1e-9 * max(abs(actual), abs(expected))
    return type(actual) is type(expected) and actual == expected
