"""Soak: memory stays bounded under a steady stream of events with fresh keys (SPEC §5.3; issue 12).

One uvicorn worker (``bench.apps:scowl_app``) serves a small topology whose
states expire quickly: ``Count`` over 30 seconds, ``CountUnique`` and a
``Sequence`` write log over 1 minute, ``DecayedCount`` with a 1-second
constant (kept ``DECAY_HORIZON`` = 40 windows), keyed by a user that is new
for every event and by one of 1,000 IPs. Its store is a private embedded
Valkey. An open-loop client posts ``POST /event`` at ``--rate`` events/s
for ``--minutes``; every ``--every`` seconds the script samples the store's
``used_memory`` and ``DBSIZE`` and the worker's RSS.

A state expires ``W + r`` (``DECAY_HORIZON * W`` for decayed sums) after its
last write, by the store's clock, so with fresh keys the store's keys and
memory must stop growing once the longest expiry (61 s) has passed, and stay
flat: the table prints each sample, the baseline measured in the same run (a
sample taken once the longest expiry has passed), and the ratio of the last
quarter's mean to that baseline, for store memory, keys and worker RSS.
A ratio near 1.0 is a plateau; an unbounded store grows with time.

Usage: ``python bench/soak.py [--minutes 4] [--rate 300] [--every 10]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

TOPOLOGY = """
event hit
user := $.user as string
ip := $.ip as string
n_user := Count(by user last 30 seconds)
ips_user := CountUnique(ip by user last 1 minute)
recent_ips := Sequence(ip by user last 1 minute limit 5)
hot := DecayedCount(by user last 1 second)
n_ip := Count(by ip last 30 seconds)
"""
#: the longest expiry of the topology's states, seconds (CountUnique/Sequence: W + r = 60 s + 1 s)
LONGEST_TTL_S = 61


async def _load(port: int, rate: float, seconds: float, sent: list[int], errors: list[int]) -> None:
    """Post fresh-key events at ``rate``/s for ``seconds`` over 8 keep-alive connections (open loop)."""
    import httpx

    limits = httpx.Limits(max_connections=8, max_keepalive_connections=8)
    async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=10) as client:
        start = time.monotonic()
        pending: set[asyncio.Task] = set()
        k = 0
        while True:
            due = start + k / rate
            now = time.monotonic()
            if due - start >= seconds:
                break
            if due > now:
                await asyncio.sleep(due - now)
            body = {"_type": "hit", "_time": int(time.time() * 1000), "user": uuid.uuid4().hex,
                    "ip": f"10.0.{k % 1000 // 250}.{k % 250}"}

            async def one(b=body) -> None:
                try:
                    r = await client.post("/event", json=b)
                    (sent if r.status_code == 200 else errors).append(1)
                except httpx.HTTPError:
                    errors.append(1)

            task = asyncio.create_task(one())
            pending.add(task)
            task.add_done_callback(pending.discard)
            k += 1
        if pending:
            await asyncio.gather(*pending)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=4.0, help="length of the soak (default 4)")
    ap.add_argument("--rate", type=float, default=300.0, help="events per second (default 300)")
    ap.add_argument("--every", type=float, default=10.0, help="seconds between samples (default 10)")
    args = ap.parse_args(argv)
    seconds = args.minutes * 60
    if seconds < 2 * LONGEST_TTL_S:
        ap.error(f"--minutes must be at least {2 * LONGEST_TTL_S / 60:.1f}: the plateau starts after {LONGEST_TTL_S} s")

    import threading

    import psutil
    import redis
    from rich.console import Console
    from rich.table import Table

    from bench.serve import start_server, stop_server
    from scowl.embedded import EmbeddedStore, free_port

    console = Console(width=max(120, Console().width))
    with tempfile.TemporaryDirectory() as tmp, EmbeddedStore(Path(tmp) / "store", persist=False) as store:
        topo = Path(tmp) / "topology"
        topo.mkdir()
        (topo / "soak.scowl").write_text(TOPOLOGY)
        port = free_port()
        server = start_server("bench.apps:scowl_app", port, {"SCOWL_REDIS_URL": store.url,
                                                              "SCOWL_TOPOLOGY": str(topo)})
        worker = psutil.Process(server.pid)
        client = redis.Redis.from_url(store.url)
        samples: list[tuple[float, int, int, float, float]] = []  # (t, sent, keys, store MB, RSS MB)
        sent: list[int] = []
        errors: list[int] = []
        loader = threading.Thread(target=lambda: asyncio.run(_load(port, args.rate, seconds, sent, errors)))
        try:
            start = time.monotonic()
            loader.start()
            with console.status("soaking") as status:
                while loader.is_alive():
                    time.sleep(args.every)
                    t = time.monotonic() - start
                    mem = client.info("memory")["used_memory"] / 2**20
                    samples.append((t, len(sent), client.dbsize(), mem, worker.memory_info().rss / 2**20))
                    status.update(f"soaking: {t:.0f} s, {len(sent):,} events, {samples[-1][2]:,} keys")
            loader.join()
        finally:
            client.close()
            stop_server(server)

    table = Table(title=f"soak: {args.rate:.0f} events/s with fresh keys for {args.minutes:g} min, one worker")
    for col in ("t (s)", "events answered", "store keys", "store used MB", "worker RSS MB"):
        table.add_column(col, justify="right")
    for t, n, keys, mem, rss in samples:
        table.add_row(f"{t:.0f}", f"{n:,}", f"{keys:,}", f"{mem:.1f}", f"{rss:.1f}")
    console.print(table)
    loaded = [s for s in samples if s[0] <= seconds] or samples  # leave out a sample taken after the load ended
    base = next((s for s in loaded if s[0] >= LONGEST_TTL_S + args.every), loaded[-1])
    tail = loaded[-max(1, len(loaded) // 4):]
    rows = [("store used MB", 3), ("store keys", 2), ("worker RSS MB", 4)]
    summary = Table(title=f"plateau: the last quarter's mean against the baseline at {base[0]:.0f} s "
                          f"(after the longest expiry, {LONGEST_TTL_S} s)")
    for col in ("measure", "baseline", "last quarter mean", "ratio"):
        summary.add_column(col, justify="right" if col != "measure" else "left")
    for name, i in rows:
        mean = statistics.fmean(s[i] for s in tail)
        summary.add_row(name, f"{base[i]:,.1f}", f"{mean:,.1f}", f"{mean / base[i]:.2f}x" if base[i] else "-")
    console.print(summary)
    console.print(f"{len(sent):,} events answered 200, {len(errors):,} not "
                  f"({len(sent) / seconds:.0f}/s of {args.rate:.0f}/s asked)")


if __name__ == "__main__":
    main()
