"""The explorer's traffic numbers, read from the service's own Prometheus collectors in-process.

A :class:`TrafficSampler` takes a :class:`Snapshot` of
``serving.metrics.service_registry()`` (its ``collect()``, no HTTP: this
process's collectors, or the sum of every worker's under ``scowl serve
--workers N``) when asked, keeps the recent ones, and
computes per event type, over the last few seconds (two snapshots at least
one poll apart):

* events/s from ``scowl_events_total``, late events/s from
  ``scowl_late_events_total`` (later than the allowed lateness, SPEC §3.3),
  out-of-order events/s from ``scowl_out_of_order_events_total`` and
  dry runs/s from ``scowl_dry_runs_total``: counter increase / seconds;
* p50 and p99 of ``scowl_event_seconds`` over the same interval: the
  increase of each cumulative bucket, then :func:`histogram_quantile`
  (Prometheus' ``histogram_quantile(q, rate(..._bucket[w]))``).

The collectors are per process: with ``scowl serve --workers N`` each worker
answers with its own counts.

Source: Prometheus documentation, "Histograms and summaries" and the
``histogram_quantile`` function (linear interpolation within a bucket; the
lowest bucket starts at 0; a rank in the ``+Inf`` bucket gives the highest
finite bound).
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Iterable

#: Counter families read (the name ``REGISTRY.collect()`` reports, without ``_total``) -> key in a snapshot.
COUNTERS = {
    "scowl_events": "events",
    "scowl_late_events": "late",
    "scowl_out_of_order_events": "out_of_order",
    "scowl_dry_runs": "dry_runs",
}
#: The latency histogram family (seconds, label ``event_type``).
LATENCY = "scowl_event_seconds"


def histogram_quantile(q: float, buckets: Iterable[tuple[float, float]]) -> float | None:
    """Return the ``q``-quantile of a histogram given as cumulative ``(upper bound, count)`` buckets.

    Prometheus' rule: find the first bucket whose cumulative count reaches
    ``q * total`` and interpolate linearly between its lower bound (the
    previous bucket's upper bound, 0 for the first) and its upper bound. A
    rank in the ``+Inf`` bucket answers the highest finite bound.

    Args:
        q: the quantile, 0 ≤ q ≤ 1.
        buckets: ``(le, cumulative count)`` pairs, any order, ``+Inf`` included.

    Returns:
        The estimate in the buckets' unit, or ``None`` when the histogram is
        empty (no observation).

    >>> b = [(0.1, 5), (0.2, 10), (0.5, 10), (math.inf, 10)]
    >>> histogram_quantile(0.5, b), histogram_quantile(0.75, b), histogram_quantile(0.99, [(1.0, 0), (math.inf, 3)])
    (0.1, 0.15000000000000002, 1.0)
    >>> histogram_quantile(0.5, [(1.0, 0), (math.inf, 0)]) is None
    True
    """
    bs = sorted(buckets)
    if not bs or bs[-1][1] <= 0:
        return None
    total = bs[-1][1]
    rank = q * total
    prev_le, prev_count = 0.0, 0.0
    for le, count in bs:
        if count >= rank and count > 0:
            if math.isinf(le):
                finite = [b for b, _ in bs if not math.isinf(b)]
                return finite[-1] if finite else None
            in_bucket = count - prev_count
            if in_bucket <= 0:
                return le
            return prev_le + (le - prev_le) * (rank - prev_count) / in_bucket
        prev_le, prev_count = le, count
    return None


@dataclass
class Snapshot:
    """The counters and latency buckets at one moment.

    Attributes:
        t: ``time.monotonic()`` when taken (seconds).
        counters: ``{event_type: {"events"|"late"|"out_of_order"|"dry_runs": cumulative count}}``.
        buckets: ``{event_type: {le: cumulative count}}`` of ``scowl_event_seconds``.
    """

    t: float
    counters: dict[str, dict[str, float]] = field(default_factory=dict)
    buckets: dict[str, dict[float, float]] = field(default_factory=dict)


def take_snapshot(registry=None, now: float | None = None) -> Snapshot:
    """Read the collectors of ``registry`` into a :class:`Snapshot`.

    Args:
        registry: a ``prometheus_client.CollectorRegistry``; default
            ``serving.metrics.service_registry()``: this process's metrics,
            or every worker's under ``scowl serve --workers N``.
        now: the snapshot's time (default ``time.monotonic()``).
    """
    if registry is None:
        from serving.metrics import service_registry

        registry = service_registry()
    snap = Snapshot(time.monotonic() if now is None else now)
    for family in registry.collect():
        key = COUNTERS.get(family.name)
        if key is not None:
            for s in family.samples:
                if s.name.endswith("_total") and "event_type" in s.labels:
                    snap.counters.setdefault(s.labels["event_type"], {})[key] = s.value
        elif family.name == LATENCY:
            for s in family.samples:
                if s.name.endswith("_bucket") and "event_type" in s.labels:
                    le = float(s.labels["le"])
                    snap.buckets.setdefault(s.labels["event_type"], {})[le] = s.value
    return snap


def _rate(new: float, old: float, seconds: float) -> float:
    """Counter increase per second; a reset (new < old) counts from 0, as Prometheus' ``rate``."""
    inc = new - old if new >= old else new
    return inc / seconds if seconds > 0 else 0.0


class TrafficSampler:
    """Snapshots of the metrics on demand, and rates and quantiles between them (module docstring).

    Thread-safe: several browser tabs may poll at once; a snapshot is taken
    at most every ``min_interval_s`` and kept for ``keep_s``.

    Args:
        registry: the collectors (default ``serving.metrics.service_registry()``).
        min_interval_s: polls closer than this reuse the newest snapshot.
        keep_s: how long snapshots are kept (the longest window asked for).
    """

    def __init__(self, registry=None, min_interval_s: float = 0.25, keep_s: float = 120.0):
        self.registry = registry
        self.min_interval_s = min_interval_s
        self.keep_s = keep_s
        self._snaps: deque[Snapshot] = deque()
        self._lock = threading.Lock()

    def sample(self, now: float | None = None) -> Snapshot:
        """Take a snapshot (unless the newest is younger than ``min_interval_s``) and return the newest."""
        now = time.monotonic() if now is None else now
        with self._lock:
            if not self._snaps or now - self._snaps[-1].t >= self.min_interval_s:
                self._snaps.append(take_snapshot(self.registry, now))
            while len(self._snaps) > 2 and now - self._snaps[0].t > self.keep_s:
                self._snaps.popleft()
            return self._snaps[-1]

    def report(self, event_types: Iterable[str], window_s: float = 5.0, now: float | None = None) -> dict[str, Any]:
        """Sample, then return the traffic of the last ``window_s`` seconds per event type.

        The interval runs from the oldest snapshot no older than
        ``window_s`` (else the newest one before it) to the snapshot just
        taken; on the very first call there is none: rates and quantiles are
        ``None``.

        Args:
            event_types: the plan's event types (listed even without traffic;
                types seen only in the metrics are added).
            window_s: the averaging window, seconds.
            now: the time (default ``time.monotonic()``).

        Returns:
            ``{"interval_s": float|None, "event_types": [{"event_type",
            "events_per_s", "late_per_s", "out_of_order_per_s",
            "dry_runs_per_s", "p50_ms", "p99_ms", "events_total",
            "late_total", "out_of_order_total", "dry_runs_total"}]}``:
            rates per second (``None`` without an interval), quantiles in
            milliseconds (``None`` without an event in the interval),
            totals since the process started.
        """
        newest = self.sample(now)
        with self._lock:
            older = [s for s in self._snaps if s is not newest and s.t < newest.t]
        base = None
        for s in reversed(older):  # newest first: the oldest within the window, else the newest before it
            if newest.t - s.t <= window_s or base is None:
                base = s
            else:
                break
        seconds = newest.t - base.t if base is not None else None
        types = list(dict.fromkeys([*event_types, *sorted(newest.counters), *sorted(newest.buckets)]))
        rows = []
        for et in types:
            cur = newest.counters.get(et, {})
            row: dict[str, Any] = {"event_type": et}
            for key in COUNTERS.values():
                row[f"{key}_total"] = int(cur.get(key, 0))
                if base is None or not seconds:
                    row[f"{key}_per_s"] = None
                else:
                    row[f"{key}_per_s"] = _rate(cur.get(key, 0.0), base.counters.get(et, {}).get(key, 0.0), seconds)
            p50 = p99 = None
            if base is not None:
                new_b = newest.buckets.get(et, {})
                old_b = base.buckets.get(et, {})
                delta = [(le, max(0.0, c - old_b.get(le, 0.0))) for le, c in new_b.items()]
                q50, q99 = histogram_quantile(0.5, delta), histogram_quantile(0.99, delta)
                p50 = None if q50 is None else q50 * 1000
                p99 = None if q99 is None else q99 * 1000
            row["p50_ms"], row["p99_ms"] = p50, p99
            rows.append(row)
        return {"interval_s": seconds, "event_types": rows}
