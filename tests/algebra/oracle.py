"""A brute-force reference for aggregates over a window (SPEC §2.4, §3.2).

No tiles, no algebra: the list of writes is filtered by the window rule and
the function applied directly. Tests compare every engine with it.
"""

from __future__ import annotations

from typing import Any, Sequence


def counts(s_ms: int, t_ms: int, window_s: int, r_s: int, after_ms: int | None = None) -> bool:
    """SPEC §3.2: does a write at ``s_ms`` count for a read at ``t_ms``?"""
    r = r_s * 1000
    if not (s_ms // r > (t_ms - window_s * 1000) // r and s_ms <= t_ms):
        return False
    return after_ms is None or s_ms // r > after_ms // r


def aggregate(function: str, writes: Sequence[tuple[int, tuple]], names: Sequence[str] = ()) -> Any:
    """Apply ``function`` to the counted ``writes`` (``(time_ms, values)`` in arrival order)."""
    vals = [v for _, v in writes]
    if function == "Count":
        return len(writes)
    if function == "Sum":
        if not vals:
            return 0
        total = sum(v[0] for v in vals)
        if isinstance(total, int) and not -(2**63) <= total < 2**63:
            return None  # an int total outside int64 (SPEC §3.5: int results are 64-bit)
        return total
    if function == "Average":
        return None if not vals else sum(v[0] for v in vals) / len(vals)
    if function == "Min":
        return min((v[0] for v in vals), default=None)
    if function == "Max":
        return max((v[0] for v in vals), default=None)
    if function == "CountUnique":
        return len({tuple(v) for v in vals})
    if function in ("Latest", "LatestTime"):
        if not writes:
            return None
        best = None
        for w in writes:  # later arrival wins ties
            if best is None or w[0] >= best[0]:
                best = w
        if function == "LatestTime":
            return best[0]
        return best[1][0] if len(best[1]) == 1 else dict(zip(names, best[1]))
    raise ValueError(function)
