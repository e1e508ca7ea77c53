"""Helpers of the explorer's tests: the two topologies, an app with the explorer, a store with something in it."""

from __future__ import annotations

from pathlib import Path

import redis

from compiler import compile_dir
from scowl.ui import install_ui
from serving.app import create_app
from serving.settings import Settings

ROOT = Path(__file__).resolve().parents[2]
#: The demo topology (cross-event scopes, an inline aggregate).
FLIGHTS = ROOT / "examples" / "flights"
#: A second topology: nested input paths, defaults, cross-event scopes into an inline aggregate.
PAYMENTS = Path(__file__).resolve().parent / "payments"

#: 2013-12-01T00:00:00Z, where the seeded online events start.
DEC_1_MS = 1_385_856_000_000
DAY_MS = 86_400_000


def compile_topology(directory: Path):
    """Compile ``directory``; fail the test with its diagnostics on error."""
    result = compile_dir(directory)
    assert result.plan is not None, result.render()
    return result.plan


def ui_app(directory: Path, redis_url: str, **settings):
    """``create_app`` for ``directory`` over ``redis_url`` with ``Settings(**settings)``, explorer installed."""
    app = create_app(compile_topology(directory), Settings(**settings), redis_url=redis_url)
    install_ui(app, directory)
    return app


def record_backfill(redis_url: str, plan, intervals: list[tuple[int, int]]) -> None:
    """Record backfilled intervals for every state of ``plan`` as ``scowl backfill`` does (``writer.status``)."""
    from writer.status import record_coverage

    client = redis.Redis.from_url(redis_url)
    try:
        for lo, hi in intervals:
            record_coverage(client, sorted(plan.states), lo, hi, now_ms=0)
    finally:
        client.close()


def flights_events(n: int = 120, start_ms: int = DEC_1_MS) -> list[dict]:
    """``n`` departures a minute apart from ``start_ms`` over 3 airports, 3 carriers, 4 aircraft, with weather
    observations, arrivals and a cancellation now and then (deterministic)."""
    carriers, origins, dests, tails = ("UA", "AA", "B6"), ("EWR", "JFK", "LGA"), ("IAH", "MIA", "ORD", "ATL"), \
        ("N101", "N202", "N303", "N404")
    out: list[dict] = []
    for i in range(n):
        t = start_ms + i * 60_000
        out.append({"_type": "departure", "_time": t, "carrier": carriers[i % 3], "flight": 100 + i,
                    "tailnum": tails[i % 4], "origin": origins[i % 3], "dest": dests[i % 4],
                    "dep_delay": float((i * 7) % 45 - 5), "distance": 500 + 10 * i})
        if i % 5 == 0:
            out.append({"_type": "weather_obs", "_time": t, "origin": origins[i % 3], "visib": 10.0 - i % 4,
                        "wind_speed": 3.0 + i % 7})
        if i % 4 == 0:
            out.append({"_type": "arrival", "_time": t, "dest": dests[i % 4], "carrier": carriers[i % 3],
                        "arr_delay": float(i % 50)})
        if i % 17 == 0:
            out.append({"_type": "cancellation", "_time": t, "carrier": carriers[i % 3], "origin": origins[i % 3]})
    return out


def payments_events(n: int = 40, start_ms: int = DEC_1_MS) -> list[dict]:
    """Logins, payments and refunds of 3 users (deterministic), with nested paths as the topology reads them."""
    users = ("ann", "bob", "cy")
    out: list[dict] = []
    for i in range(n):
        t = start_ms + i * 30_000
        u = users[i % 3]
        out.append({"_type": "login", "_time": t, "user": {"id": u}, "ip": f"10.0.0.{i % 4}", "failed": i % 6 == 0})
        out.append({"_type": "payment", "_time": t + 1000, "user": {"id": u},
                    "payment": {"amount": 20.0 + 13 * (i % 9), "currency": "EUR"}, "cards": [f"card-{u}"]})
        if i % 7 == 0:
            out.append({"_type": "refund", "_time": t + 2000, "user": u, "amount": 5.0})
    return out


def feature_names(plan) -> dict[str, list[str]]:
    """Every feature of every event (inline aggregates included), in plan order."""
    return {e: [f.name for f in ev.features] for e, ev in plan.events.items()}
