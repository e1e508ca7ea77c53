"""Prometheus metrics of the serving API (``GET /metrics``).

With ``scowl serve --workers N`` each worker is a process of its own with
its own counters. ``scowl.commands.serve.run_workers`` then gives the
workers ``PROMETHEUS_MULTIPROC_DIR`` (prometheus_client's multiprocess
mode, as under gunicorn): each worker's values live in files there, and
:func:`exposition` adds up every worker's, so a scrape answered by any
worker gives the service's totals. Before, a scrape gave the totals of the
worker that happened to answer it (measured 2026-12-05: 60 events over 2
workers scraped as 37, 23, 37, 23, ...: counters that seemed to go back).
"""

from __future__ import annotations

import hashlib
import os

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Counter, Gauge, Histogram, generate_latest

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

ERROR_RESPONSES = Counter(
    "scowl_error_responses", "Requests answered with the error body (SPEC §4), by HTTP status and error code "
    "(bad input 4xx, store-unavailable 503, ...).", ["status", "code"], registry=REGISTRY)
FEATURE_ERRORS = Counter(
    "scowl_feature_errors", "Features answered with an error (the response's errors: a missing required input, a "
    "value of the wrong type, ...), by event type and feature; recorded events only, as scowl_events_total.",
    ["event_type", "feature"], registry=REGISTRY)
BUILD_INFO = Gauge(
    "scowl_build_info", "1, labelled with the scowl version and the served plan's digest (the first 16 hex digits "
    "of the SHA-256 of what `scowl plan DIR --json` prints): workers of one deploy show one digest.",
    ["version", "plan"], registry=REGISTRY, multiprocess_mode="max")


def count_error(status: int, code: str) -> None:
    """Count one error response in ``scowl_error_responses_total`` (each path that answers the error body calls it).

    Args:
        status: the HTTP status answered (e.g. 400, 503).
        code: the body's error code (``malformed-json``, ``store-unavailable``, ...).
    """
    ERROR_RESPONSES.labels(str(status), code).inc()


def count_feature_errors(event_type: str, resp: dict) -> None:
    """Count the features of one recorded event's response that carry an error (``scowl_feature_errors_total``).

    Args:
        event_type: the event's type.
        resp: the evaluator's response; its ``errors`` (feature -> message,
            present only when non-empty, SPEC §3.5) are counted.
    """
    errors = resp.get("errors")
    if errors:
        for name in errors:
            FEATURE_ERRORS.labels(event_type, name).inc()


def set_build_info(version: str, plan_json: bytes) -> None:
    """Set ``scowl_build_info{version, plan}`` to 1 for this process's served plan.

    Args:
        version: scowl's version (``importlib.metadata``).
        plan_json: the bytes ``scowl plan DIR --json`` prints for the served
            plan (``compiler.plan.Plan.dumps`` and a newline); the first 16
            hex digits of their SHA-256 label the gauge, so
            ``scowl plan DIR --json | sha256sum`` tells which topology a
            process serves.
    """
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):  # a worker of several builds one app, and clear() only
        # warns in multiprocess mode
        BUILD_INFO.clear()  # one served plan per process: an app built again (tests, the explorer) replaces it
    BUILD_INFO.labels(version, hashlib.sha256(plan_json).hexdigest()[:16]).set(1)


#: The ``Content-Type`` of :func:`exposition`'s text.
CONTENT_TYPE = CONTENT_TYPE_LATEST


def service_registry() -> CollectorRegistry:
    """The collectors of the whole service: :data:`REGISTRY`, or every worker's files in multiprocess mode.

    Returns:
        :data:`REGISTRY` in one process; with ``PROMETHEUS_MULTIPROC_DIR``
        set, a new registry whose ``MultiProcessCollector`` sums what every
        process of the service wrote there (``scowl serve --workers N``).
    """
    if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        from prometheus_client.multiprocess import MultiProcessCollector

        registry = CollectorRegistry()
        MultiProcessCollector(registry)
        return registry
    return REGISTRY


def exposition() -> bytes:
    """The Prometheus text of every metric: this process's, or every worker's in multiprocess mode.

    Returns:
        The text exposition format, as bytes, of :func:`service_registry`
        (multiprocess mode needs ``PROMETHEUS_MULTIPROC_DIR`` set before
        ``prometheus_client`` is imported, as ``run_workers`` sets it for
        the workers it starts).
    """
    return generate_latest(service_registry())
