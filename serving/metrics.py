"""Prometheus metrics of the serving API (``GET /metrics``)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram

REGISTRY = CollectorRegistry(auto_describe=True)

EVENTS = Counter("scowl_events_total", "Events evaluated, by event type.", ["event_type"], registry=REGISTRY)
#: SPEC §3.3: an event is late by d if an event d later had arrived before it (for a key it reads or writes)
OUT_OF_ORDER_EVENTS = Counter(
    "scowl_out_of_order_events", "Late events (a state they read or wrote held a later write), by event type.",
    ["event_type"], registry=REGISTRY)
LATE_EVENTS = Counter(
    "scowl_late_events", "Events later than the allowed lateness (SCOWL_ALLOWED_LATENESS), answered from what the "
    "store still holds, by event type.", ["event_type"], registry=REGISTRY)
DRY_RUNS = Counter("scowl_dry_runs_total", "Read-only evaluations (POST /event?dry_run), by event type; not in "
                   "scowl_events_total.", ["event_type"], registry=REGISTRY)
STORE_ERRORS = Counter("scowl_store_errors_total", "Requests answered 503 because the store failed.", registry=REGISTRY)
EVENT_LATENCY = Histogram(
    "scowl_event_seconds",
    "Time to evaluate one event (store round trips included), seconds, by event type; in a POST /batch, the "
    "event's share of the batch's time (pipelined events share their round trips).",
    ["event_type"],
    buckets=(0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.5),
    registry=REGISTRY,
)
