"""Windows, resolutions and multi-resolution tiles (SPEC §3.2).

Terms: a *window* ``W`` (seconds) and its *resolution* ``r`` (seconds);
``T(x) = floor(x / r)`` is the *tile index* of time ``x``. A write at event
time ``s`` counts for a read at ``t`` iff ``T(s) > T(t - W)`` and ``s <= t``
(and ``T(s) > T(a)`` with ``after a``).

Storage keeps tiles at several *levels* (tile sizes, :data:`TILE_SIZES_S`):
the resolution ``r`` and every coarser size of the ladder 1 s, 5 s, 15 s,
1 min, 5 min, 15 min, 1 h, 4 h, 1 day that is no larger than ``W``. Since each
size divides the next, the counted range of resolution tiles is covered
exactly by aligned tiles of mixed sizes: fine ones at the two edges, coarse
ones in the middle (like Chronon's hops, but exact at the tail). The ladder's
small steps keep reads short: at most ~50 tiles for any window up to a day,
~80 for 30 days, at the price of one more field per level on each write.

No pyspark or fastapi import here: serving, writer and tests share it.
"""

from __future__ import annotations

from typing import Iterator

#: Default allowed lateness in seconds (SPEC §3.3, ``SCOWL_ALLOWED_LATENESS``):
#: online values are exact for events up to this late.
ALLOWED_LATENESS_S = 3600

#: Candidate resolutions in seconds, finest first (SPEC §3.2).
LEVELS_S: tuple[int, ...] = (1, 60, 3600, 86400)

#: Stored tile sizes in seconds, finest first; each divides the next and
#: every resolution in :data:`LEVELS_S` is one of them.
TILE_SIZES_S: tuple[int, ...] = (1, 5, 15, 60, 300, 900, 3600, 14400, 86400)

#: One-letter codes of tile sizes used in hash field names (``ops.tile_field``;
#: ``event.lua`` has the same table).
LEVEL_CODE: dict[int, str] = {
    1: "s", 5: "a", 15: "b", 60: "m", 300: "c", 900: "e", 3600: "h", 14400: "f", 86400: "d",
}


def resolution_s(window_s: int) -> int:
    """Return the resolution ``r`` (seconds) of a window of ``window_s`` seconds.

    ``r`` is the largest of 1 s, 1 min, 1 h, 1 day that is ``<= W / 1000`` and
    divides ``W``; 1 s if none.

    Args:
        window_s: window length in whole seconds, ``>= 1``.

    Returns:
        The resolution in seconds, one of :data:`LEVELS_S`.

    Raises:
        ValueError: ``window_s < 1``.

    Source: SPEC §3.2.

    >>> resolution_s(600), resolution_s(86400), resolution_s(30 * 86400), resolution_s(1000 * 86400)
    (1, 60, 60, 86400)
    """
    if window_s < 1:
        raise ValueError(f"window must be at least 1 second, got {window_s}")
    best = 1
    for size in LEVELS_S:
        if size * 1000 <= window_s and window_s % size == 0:
            best = size
    return best


def levels_s(window_s: int) -> tuple[int, ...]:
    """Return the tile sizes (seconds, finest first) stored for a window.

    The resolution and every coarser size in :data:`TILE_SIZES_S` that is ``<= W``.

    >>> levels_s(600), levels_s(30 * 86400)
    ((1, 5, 15, 60, 300), (60, 300, 900, 3600, 14400, 86400))
    """
    r = resolution_s(window_s)
    return tuple(size for size in TILE_SIZES_S if size >= r and (size == r or size <= window_s))


def raw_bucket_s(resolution_s: int) -> int:
    """Return the size (seconds) of a state's raw buckets: its resolution, at least 15 s.

    Serving's writes keep each write's raw entry in the raw bucket of its
    time, for reads up to the allowed lateness late (SPEC §3.3;
    ``compiler.algebra.lua``: a late read takes its own resolution tile from
    the raw entries of its bucket). A 1-second state written every few
    seconds would otherwise create (and delete) one raw field per write; a
    15-second bucket holds a few writes. A backfill that leaves online
    writes intact stops at a bucket boundary (``writer.backfill.online_limit``),
    so no bucket mixes backfilled tiles with online raw entries.

    >>> raw_bucket_s(1), raw_bucket_s(60), raw_bucket_s(3600)
    (15, 60, 3600)
    """
    return max(resolution_s, 15)


def tile_index(time_ms: int, size_s: int) -> int:
    """Return ``floor(time_ms / (size_s * 1000))`` (works for negative times too)."""
    return time_ms // (size_s * 1000)


def counted_range(read_ms: int, window_s: int, after_ms: int | None = None) -> tuple[int, int]:
    """Return the inclusive range ``(lo, hi)`` of resolution tile indices a read counts.

    Tiles ``lo..hi`` (at resolution ``r``) hold the writes that count for a
    read at ``read_ms``, apart from the ``s <= t`` check inside tile ``hi``.
    ``lo > hi`` means nothing counts.

    Args:
        read_ms: read (event) time ``t`` in epoch ms.
        window_s: window ``W`` in seconds.
        after_ms: the ``after`` time ``a`` in epoch ms, or ``None``.

    Source: SPEC §3.2 -- ``T(s) > T(t - W)`` and ``T(s) > T(a)``.
    """
    r = resolution_s(window_s)
    lo = tile_index(read_ms - window_s * 1000, r) + 1
    if after_ms is not None:
        lo = max(lo, tile_index(after_ms, r) + 1)
    return lo, tile_index(read_ms, r)


def cover(lo: int, hi: int, r: int, sizes: tuple[int, ...]) -> Iterator[tuple[int, int]]:
    """Cover resolution tiles ``lo..hi`` exactly with aligned tiles of mixed levels.

    Args:
        lo, hi: inclusive range of tile indices at resolution ``r`` (seconds).
        r: the resolution in seconds (``sizes[0]``).
        sizes: available tile sizes in seconds, finest first, each dividing the next.

    Yields:
        ``(size_s, index)`` pairs, in time order, whose time ranges are
        disjoint and whose union is exactly ``[lo * r, (hi + 1) * r)`` seconds.

    >>> list(cover(59, 121, 1, (1, 60)))
    [(1, 59), (60, 1), (1, 120), (1, 121)]
    >>> list(cover(58, 131, 1, (1, 5, 15, 60)))
    [(1, 58), (1, 59), (60, 1), (5, 24), (5, 25), (1, 130), (1, 131)]
    """
    if lo > hi:
        return
    start = lo * r          # seconds, inclusive
    end = (hi + 1) * r      # seconds, exclusive
    while start < end:
        # the largest size aligned at ``start`` that fits before ``end``
        size = sizes[0]
        for cand in sizes[1:]:
            if start % cand == 0 and start + cand <= end:
                size = cand
        yield size, start // size
        start += size


def short_cover(lo: int, hi: int, r: int, sizes: tuple[int, ...]) -> list[tuple[int, int]]:
    """Cover resolution tiles ``lo..hi`` by the trailing edge of :func:`cover`, then whole tiles through ``hi``.

    :func:`cover` climbs from ``lo`` through finer tiles to coarser
    boundaries, then descends through finer tiles again to end exactly at
    ``hi``. This keeps the climb and replaces the descent by whole tiles of
    the level the climb reached, up to and including the one holding ``hi``,
    so the cover may end past ``hi`` (by less than one tile of that level).
    It counts the same writes as :func:`cover` when no write lies in a tile
    after ``hi``: always so for a read at the latest event time, which the
    generated scripts check with the state's ``_m`` field
    (``compiler.algebra.lua``). Fewer fields: the descent was about 40%
    of a cover.

    Args:
        lo, hi: inclusive range of tile indices at resolution ``r`` (seconds).
        r: the resolution in seconds (``sizes[0]``).
        sizes: available tile sizes in seconds, finest first, each dividing the next.

    Returns:
        ``(size_s, index)`` pairs in time order, disjoint, whose union starts
        at ``lo * r`` and ends at or after ``(hi + 1) * r``, before
        ``(hi + 1) * r + size`` of the last pair; ``[]`` when ``lo > hi``.

    Source: SPEC §3.2; the Lua ``cover(..., up)`` of ``common.lua`` is the
    same computation.

    >>> short_cover(58, 131, 1, (1, 5, 15, 60))
    [(1, 58), (1, 59), (60, 1), (60, 2)]
    """
    if lo > hi:
        return []
    start, end = lo * r, (hi + 1) * r
    out: list[tuple[int, int]] = []
    j = 0
    while j < len(sizes) - 1:
        up = sizes[j + 1]
        b = -(-start // up) * up  # the next boundary of the coarser level
        if b + up > end:
            break
        out += [(sizes[j], q) for q in range(start // sizes[j], b // sizes[j])]
        start = b
        j += 1
    size = sizes[j]
    out += [(size, q) for q in range(start // size, -(-end // size))]
    return out
