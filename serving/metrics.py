"""Prometheus metrics of the serving API (``GET /metrics``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

EVENTS = Counter("scowl_events_total", "Events evaluated, by event type.", ["event_type"], registry=REGISTRY)
STORE_ERRORS = Counter("scowl_store_errors_total", "Requests answered 503 because the store failed.", registry=REGISTRY)
EVENT_LATENCY = Histogram(
    "scowl_event_seconds",
    "Time to evaluate one event (store round trips included), seconds.",
    buckets=(0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5),
    registry=REGISTRY,
)
