"""Shared helpers of the end-to-end tests: post events through the API, compare values."""

from __future__ import annotations

import math
import os
import random
import time
from pathlib import Path

import orjson
from fastapi.testclient import TestClient

from compiler.typesystem import parse_time
from serving.app import create_app
from serving.settings import Settings


def close(a, b):
    """Equal, with floats within 1e-9 relative (SPEC §3.3), recursively in structs."""
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=1e-9, abs_tol=1e-12)
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(close(a[k], b[k]) for k in a)
    return a == b


def post_all(plan, url, events, **settings):
    """POST ``events`` in order through ``/batch`` (500 a request); return the feature dicts.

    ``settings``: :class:`serving.settings.Settings` fields (e.g. ``allowed_lateness``).
    """
    app = create_app(plan, Settings(**settings), redis_url=url)
    out = []
    with TestClient(app) as c:
        for i in range(0, len(events), 500):
            r = c.post("/batch", content=orjson.dumps(events[i : i + 500]), headers={"content-type": "application/json"})
            assert r.status_code == 200, r.text
            out.extend(x["features"] for x in r.json())
    return out


def assert_values_equal(got: list[dict], want: list[dict], what: str) -> None:
    """Every feature of ``want`` equal in ``got``, event by event (floats by :func:`close`)."""
    assert len(got) == len(want), what
    for i, (a, b) in enumerate(zip(got, want)):
        diffs = {k: (a.get(k), b[k]) for k in b if not close(a.get(k), b[k])}
        assert not diffs, f"{what}: event {i}: {diffs}"


def stream_chunks(spark, plan, url: str, chunks: list[list[dict]], tmp_path: Path):
    """Run ``scowl stream`` (``dir:`` source, ``available_now``) over ``chunks``, one file and micro-batch each.

    Returns:
        The ``writer.stream`` report.
    """
    from writer.stream import run_stream

    src = tmp_path / "in"
    src.mkdir()
    now = time.time()
    for i, chunk in enumerate(chunks):  # files in order of their modification times
        p = src / f"part-{i}.jsonl"
        p.write_bytes(b"\n".join(orjson.dumps(e) for e in chunk) + b"\n")
        os.utime(p, (now - 100 + 10 * i, now - 100 + 10 * i))
    return run_stream(spark, plan, url, f"dir:{src}", tmp_path / "ck", available_now=True, max_files_per_trigger=1)


def displaced(events: list[dict], seed: int, lateness_ms: int = 3_600_000) -> list[dict]:
    """``events`` (in time order) in an arrival order where each is up to ``lateness_ms`` late (SPEC §3.3).

    Each event arrives at its time plus a delay: none for about half, else
    up to ``lateness_ms`` (a third of those under 2 s, so same-tile and
    same-millisecond displacements are common); arrival is sorted by that,
    ties in time order. An event is then late by at most ``lateness_ms``:
    one that arrived before it has ``t' + d' <= t + d``.
    """
    rng = random.Random(seed)
    times = [parse_time(e["_time"]) for e in events]
    delays = []
    for _ in events:
        k = rng.random()
        delays.append(0 if k < 0.5 else rng.randint(0, 2_000) if k < 0.67 else rng.randint(0, lateness_ms))
    order = sorted(range(len(events)), key=lambda i: (times[i] + delays[i], i))
    return [events[i] for i in order]


#: ``login`` aggregate lines for :func:`login_purchase_topology`: every kind of state (tiles, write
#: logs, CountUnique, HyperLogLog, Decayed*), ``exclusive``, ``after`` and a global key, in one script call
LOGIN_EVERY_FUNCTION = """
n_user := Count(by user last 1 hour)
sum_ip := Sum(amount by ip last 1 day)
avg_user := Average(amount by user last 10 minutes)
max_ip := Max(amount by ip where amount > 1 last 1 day)
recent := Sequence(ip by user last 1 hour limit 3)
uniq := CountUnique(ip by user last 1 day)
hll := HyperLogLog(user by ip last 1 day)
prev := LatestTime(by user exclusive)
first_ip := First(ip by user last 1 day)
decayed := DecayedSum(amount by user last 1 hour)
since_prev := Count(by user after prev last 1 day)
n_all := Count(last 1 hour)
"""
#: ``purchase`` aggregate lines for :func:`login_purchase_topology`: its own Sum and a cross-event Count<login>
PURCHASE_AGGREGATES = """
spent := Sum(total by user last 1 day)
logins := Count<login>(by user last 1 hour)
"""


def login_purchase_topology(login: str, purchase: str = "") -> str:
    """The ``.scowl`` text of :func:`login_purchase_events`' two event types, their inputs declared here,
    with the aggregate (and scalar) lines ``login`` and ``purchase`` added to each."""
    return ("event login\nuser := $.user as string\nip := $.ip as string?\namount := $.amount as float?\n"
            + login.strip() + "\n\nevent purchase\nuser := $.user as string\ntotal := $.total as int\n"
            + purchase.strip() + "\n")


def login_purchase_events(n: int, seed: int, start_ms: int, n_users: int = 12, n_ips: int = 6,
                          digits: int | None = None) -> list[dict]:
    """``n`` seeded ``login``/``purchase`` events from ``start_ms`` on, in time order.

    Same-ms ties, steps from 0 to 400 s, a unicode/separator user key, null
    ips and amounts (rounded to ``digits`` when given), int64 totals.
    """
    rng = random.Random(seed)
    users = [f"u{i}" for i in range(n_users)] + ["ü-ñ|{x}"]
    ips = [f"10.0.0.{i}" for i in range(n_ips)] + [None]
    t = start_ms
    out = []
    for _ in range(n):
        t += rng.choice([0, 0, 1, 250, 1000, 30_000, 120_000, 400_000])
        if rng.random() < 0.8:
            ev = {"_type": "login", "_time": t, "user": rng.choice(users), "ip": rng.choice(ips)}
            amount = rng.uniform(0, 100)
            ev["amount"] = rng.choice([None, amount if digits is None else round(amount, digits)])
            ev["items"] = rng.randint(-3, 9)
            out.append(ev)
        else:
            out.append({"_type": "purchase", "_time": t, "user": rng.choice(users), "total": rng.randint(1, 10**12)})
    return out
