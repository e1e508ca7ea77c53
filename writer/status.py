"""What the store holds per aggregate state: coverage, gaps, size (SPEC §5.6, §6 ``scowl status``).

Coverage comes from the intervals backfill records in ``sc:cov:<definition
hash>`` (field ``<start_ms>-<end_ms>``, see ``writer.backfill``); size from one
``SCAN`` over the state keys ``sc:{<entity key>}:<definition hash>``
(``compiler.algebra.keys``) with ``MEMORY USAGE`` per key.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import redis

from compiler.algebra.keys import PREFIX
from compiler.plan import Plan


@dataclass
class StateStatus:
    """Status of one aggregate state.

    Attributes:
        definition_hash: the state's namespace (SPEC §5.4).
        function, window_s, resolution_s, limit: from the plan.
        features: ``event.feature`` names that read this state.
        covered: merged backfilled intervals ``(start_ms, end_ms)``, sorted.
        gaps: holes between covered intervals ``(start_ms, end_ms)``.
        keys: number of entity keys stored.
        bytes: sum of ``MEMORY USAGE`` of those keys.
    """

    definition_hash: str
    function: str
    window_s: int
    resolution_s: int
    limit: int | None
    features: list[str] = field(default_factory=list)
    covered: list[tuple[int, int]] = field(default_factory=list)
    gaps: list[tuple[int, int]] = field(default_factory=list)
    keys: int = 0
    bytes: int = 0


def merge_intervals(intervals: list[tuple[int, int]]) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """Merge half-open intervals; return ``(covered, gaps)``, both sorted.

    Touching intervals (``[a, b)`` and ``[b, c)``) merge.

    >>> merge_intervals([(5, 9), (0, 3), (3, 4)])
    ([(0, 4), (5, 9)], [(4, 5)])
    """
    covered: list[tuple[int, int]] = []
    for lo, hi in sorted(intervals):
        if covered and lo <= covered[-1][1]:
            covered[-1] = (covered[-1][0], max(covered[-1][1], hi))
        else:
            covered.append((lo, hi))
    gaps = [(a[1], b[0]) for a, b in zip(covered, covered[1:])]
    return covered, gaps


def store_status(plan: Plan, redis_url: str) -> list[StateStatus]:
    """Return the status of every state of ``plan`` in the store at ``redis_url``.

    Args:
        plan: the compiled plan.
        redis_url: the store.

    Returns:
        One :class:`StateStatus` per state, sorted by reading feature names.

    Raises:
        redis.RedisError: the store is unreachable.
    """
    out: dict[str, StateStatus] = {}
    for h, st in plan.states.items():
        out[h] = StateStatus(h, st.function, st.window_s, st.resolution_s, st.limit)
    for ev in plan.events.values():
        for f in ev.features:
            if f.aggregate is not None and f.aggregate.definition_hash in out:
                out[f.aggregate.definition_hash].features.append(f"{ev.name}.{f.name}")
    client = redis.Redis.from_url(redis_url)
    try:
        for h, s in out.items():
            spans = []
            for k in client.hkeys(f"{PREFIX}cov:{h}"):
                lo, _, hi = k.decode().rpartition("-")
                spans.append((int(lo), int(hi)))
            s.covered, s.gaps = merge_intervals(spans)
        batch: list[bytes] = []

        def measure() -> None:
            pipe = client.pipeline(transaction=False)
            for key in batch:
                pipe.memory_usage(key, samples=0)
            for key, size in zip(batch, pipe.execute()):
                h = key.decode("utf-8", "replace").rsplit(":", 1)[-1]
                if h in out:
                    out[h].keys += 1
                    out[h].bytes += int(size or 0)
            batch.clear()

        for key in client.scan_iter(match=PREFIX + "{*", count=1000):
            batch.append(key)
            if len(batch) >= 1000:
                measure()
        measure()
    finally:
        client.close()
    return sorted(out.values(), key=lambda s: (s.features, s.definition_hash))
