"""The explorer's store page: per aggregate state, keys, bytes, backfill coverage with gaps, online start.

The numbers are ``writer.status.store_status`` (what ``scowl status``
prints): synchronous Redis calls, so :class:`StoreStatusCache` runs them in a
worker thread (``anyio.to_thread.run_sync``) and keeps the answer a few
seconds (one ``SCAN`` of the store per refresh, however many tabs poll).

:func:`timeline_svg` draws one state's coverage as an SVG strip on an axis
shared by all states (:func:`time_domain`, :func:`axis_ticks`): backfilled
intervals filled, gaps between them hatched, and the online writer's start
as a marker with a line to the right edge (the online path writes from then
on).

Source: SPEC §5.6 (covered intervals, gaps), §6 (``scowl status``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from html import escape
from typing import Any, Callable

#: Seconds a store status is reused before it is read again.
CACHE_S = 5.0


class StoreStatusCache:
    """``store_status(plan, url)`` in a thread, cached for ``ttl_s`` (module docstring).

    Args:
        plan: the compiled plan.
        url: the store's URL (``app.state.redis_url``).
        ttl_s: how long an answer is reused, seconds.
        read: the function called as ``read(plan, url)`` (default
            ``writer.status.store_status``; tests pass their own).
    """

    def __init__(self, plan, url: str, ttl_s: float = CACHE_S, read: Callable | None = None):
        self.plan = plan
        self.url = url
        self.ttl_s = ttl_s
        self._read = read
        self._value: tuple[float, list] | None = None
        self._lock = asyncio.Lock()

    async def get(self) -> tuple[list, float]:
        """Return ``(states, age_s)``: the ``writer.status.StateStatus`` list and how old it is.

        Raises:
            redis.RedisError: the store failed (nothing cached then).
        """
        import anyio

        async with self._lock:
            now = time.monotonic()
            if self._value is None or now - self._value[0] > self.ttl_s:
                read = self._read
                if read is None:
                    from writer.status import store_status as read
                states = await anyio.to_thread.run_sync(read, self.plan, self.url)
                self._value = (time.monotonic(), states)
            taken, states = self._value
            return states, time.monotonic() - taken


def state_json(s) -> dict[str, Any]:
    """Return one ``writer.status.StateStatus`` as JSON (``GET /ui/store.json``).

    Returns:
        ``{"definition_hash", "function", "window_s", "resolution_s", "limit",
        "features", "covered": [[start_ms, end_ms]], "gaps": [[start_ms,
        end_ms]], "online_since_ms", "keys", "bytes"}``.
    """
    return {
        "definition_hash": s.definition_hash, "function": s.function, "window_s": s.window_s,
        "resolution_s": s.resolution_s, "limit": s.limit, "features": list(s.features),
        "covered": [list(c) for c in s.covered], "gaps": [list(g) for g in s.gaps],
        "online_since_ms": s.online_since, "keys": s.keys, "bytes": s.bytes,
    }


def time_domain(states) -> tuple[int, int] | None:
    """Return the ``(start_ms, end_ms)`` every timeline shares, or ``None`` when nothing is recorded.

    It spans every covered interval and online start, widened by 4% on the
    right when there is an online start (room for its line) and to at least
    one hour.
    """
    points: list[int] = []
    for s in states:
        for a, b in s.covered:
            points += [a, b]
        if s.online_since is not None:
            points.append(s.online_since)
    if not points:
        return None
    lo, hi = min(points), max(points)
    if any(s.online_since is not None for s in states):
        hi += max((hi - lo) // 25, 60_000)
    if hi - lo < 3_600_000:
        hi = lo + 3_600_000
    return lo, hi


#: Tick steps tried, shortest first (ms); a month and a year as 30 and 365 days.
_STEPS_MS = (60_000, 300_000, 900_000, 3_600_000, 6 * 3_600_000, 86_400_000, 7 * 86_400_000,
             30 * 86_400_000, 91 * 86_400_000, 365 * 86_400_000)


def axis_ticks(lo: int, hi: int, most: int = 7) -> list[tuple[int, str]]:
    """Return at most ``most`` ticks ``(ms, label)`` within ``[lo, hi]`` at a round step.

    Ticks fall on whole steps of UTC time (whole days are midnights; months
    fall on the 1st); labels are dates (``2013-03-01``), with the time of day
    when the step is under a day (``03-01 06:00``).

    >>> axis_ticks(0, 86_400_000 * 3)
    [(0, '1970-01-01'), (86400000, '1970-01-02'), (172800000, '1970-01-03'), (259200000, '1970-01-04')]
    """
    span = max(hi - lo, 1)
    step = next((s for s in _STEPS_MS if span / s <= most), _STEPS_MS[-1])
    out: list[tuple[int, str]] = []
    if step >= 30 * 86_400_000:
        months = 1 if step == 30 * 86_400_000 else 3 if step == 91 * 86_400_000 else 12
        d = datetime.fromtimestamp(lo / 1000, tz=timezone.utc)
        y, m = d.year, d.month
        while True:
            ms = int(datetime(y, m, 1, tzinfo=timezone.utc).timestamp() * 1000)
            if ms > hi:
                break
            if ms >= lo and (m - 1) % months == 0:
                out.append((ms, f"{y}-{m:02d}-01" if months < 12 else str(y)))
            y, m = (y + 1, 1) if m == 12 else (y, m + 1)
    else:
        t = -(-lo // step) * step
        while t <= hi:
            d = datetime.fromtimestamp(t / 1000, tz=timezone.utc)
            out.append((t, d.strftime("%Y-%m-%d") if step >= 86_400_000 else d.strftime("%m-%d %H:%M")))
            t += step
    return out


def short_time(ms: int) -> str:
    """Return epoch ms as a compact UTC time for a person: ``2013-11-01 05:30`` (seconds only when not zero).

    >>> short_time(1383283800000), short_time(1383283801500)
    ('2013-11-01 05:30', '2013-11-01 05:30:01')
    """
    d = datetime.fromtimestamp(ms / 1000, tz=timezone.utc)
    return d.strftime("%Y-%m-%d %H:%M" if d.second == 0 else "%Y-%m-%d %H:%M:%S")


def _fmt(ms: int) -> str:
    from compiler.typesystem import format_time

    return format_time(ms)


@dataclass
class Scale:
    """A linear map from ``[lo_ms, hi_ms]`` to ``[0, width]`` pixels."""

    lo_ms: int
    hi_ms: int
    width: float

    def x(self, ms: int) -> float:
        """Pixel position of ``ms``, clamped to the strip."""
        f = (ms - self.lo_ms) / max(self.hi_ms - self.lo_ms, 1)
        return round(min(max(f, 0.0), 1.0) * self.width, 1)


def timeline_svg(s, domain: tuple[int, int] | None, width: int = 560, height: int = 22) -> str:
    """Return one state's coverage strip as an inline SVG (module docstring).

    Args:
        s: a ``writer.status.StateStatus``.
        domain: the shared ``(start_ms, end_ms)`` (:func:`time_domain`);
            ``None``: an empty strip.
        width, height: pixels.

    Returns:
        ``<svg ...>`` markup with ``<title>`` tooltips (ISO times): rects of
        class ``covered`` and ``gap``, a line and marker of class ``online``.
    """
    parts = [f'<svg class="timeline" width="{width}" height="{height}" viewBox="0 0 {width} {height}" '
             f'role="img" aria-label="coverage of state {escape(s.definition_hash)}">',
             f'<rect class="track" x="0" y="5" width="{width}" height="{height - 10}"/>']
    if domain is not None:
        sc = Scale(domain[0], domain[1], width)
        for a, b in s.gaps:
            x0, x1 = sc.x(a), sc.x(b)
            parts.append(f'<rect class="gap" x="{x0}" y="3" width="{max(x1 - x0, 1.5)}" height="{height - 6}">'
                         f'<title>gap {_fmt(a)} .. {_fmt(b)}</title></rect>')
        for a, b in s.covered:
            x0, x1 = sc.x(a), sc.x(b)
            parts.append(f'<rect class="covered" x="{x0}" y="3" width="{max(x1 - x0, 1.5)}" height="{height - 6}">'
                         f'<title>backfilled {_fmt(a)} .. {_fmt(b)}</title></rect>')
        if s.online_since is not None:
            x0 = sc.x(s.online_since)
            mid = height / 2
            parts.append(f'<g class="online"><title>online since {_fmt(s.online_since)}</title>'
                         f'<line x1="{x0}" y1="{mid}" x2="{width}" y2="{mid}"/>'
                         f'<path d="M{x0 - 5},{1} L{x0 + 5},{1} L{x0},{mid} Z"/>'
                         f'<line x1="{x0}" y1="1" x2="{x0}" y2="{height - 1}"/></g>')
    parts.append("</svg>")
    return "".join(parts)


def axis_svg(domain: tuple[int, int] | None, width: int = 560, height: int = 26) -> str:
    """Return the time axis for :func:`timeline_svg` strips of the same ``width`` (empty without a domain)."""
    if domain is None:
        return ""
    sc = Scale(domain[0], domain[1], width)
    parts = [f'<svg class="axis" width="{width}" height="{height}" viewBox="0 -2 {width} {height}">',
             f'<line x1="0" y1="{height - 4}" x2="{width}" y2="{height - 4}"/>']
    for ms, label in axis_ticks(*domain):
        x = sc.x(ms)
        anchor = "start" if x < 30 else "end" if x > width - 30 else "middle"
        parts.append(f'<line x1="{x}" y1="{height - 9}" x2="{x}" y2="{height - 4}"/>'
                     f'<text x="{x}" y="{height - 12}" text-anchor="{anchor}">{escape(label)}</text>')
    parts.append("</svg>")
    return "".join(parts)
