"""Valkey CPU per event on one hot key as its raw buckets fill: the cost of keeping raw entries for late reads (issue 10).

For late reads (SPEC §3.3) every write of a tiled or ``Decayed*`` state
keeps its raw entry in the state's *raw bucket* (``compiler.algebra.lua``,
``raw_append``; the bucket is ``compiler.algebra.windows.raw_bucket_s(r)``:
15 s for 1-second states, else the resolution: 60 s, 1 hour, 1 day). Up to
5c2862b a bucket was one hash field that every write read whole, extended
and wrote back: O(entries already in the bucket) per write, O(rate x
bucket) on a key written ``rate`` times a second, and through a whole hour
for a 1-hour bucket (windows of 1,000 hours or more with a whole number of
hours: ``last 90 days``). Since 2673a9b a bucket goes on in chunks of
~2 KB and a write copies at most two. Up to 23bfa37 a late read parsed
every entry of its bucket; since 7f8809b a closed chunk carries its time
range and partial aggregates (``raw_close``) and a late read parses only
the open chunk and those straddling its time (``raw_scan``): ``--late-ms``
shows that cost.

Since the ninth session (2026-11-30) online ``Count``, ``Sum``, ``Average``,
``First*`` and ``Decayed*`` writes keep running members in a sorted set
instead (``compiler.algebra.lua`` ``pc_write``, ``dr_write``): their largest
raw field is 0, and the rows measure those members (a late write adds to the
ones after it).

This script measures the cost per call as buckets fill. For each state of :data:`STATES`, alone
in a one-aggregate topology (a global ``Count`` or ``DecayedCount``: every
event writes the same key, the hottest key there is), it evaluates ``--seconds`` of event
time at ``--rate`` events per second through serving's evaluator against an
embedded Valkey (``bench.lua_calls.capture_calls``: the real script calls,
keys and arguments), then replays those calls in a fresh store, pipelined,
in ``--windows`` consecutive slices, and prints Valkey's CPU per call
(``INFO cpu``, the least of ``--repeat`` runs) in the first slice -- the
floor, from the same run: the same state with its buckets nearly empty --
and in the last, their ratio, and the largest raw bucket field at the end.
``--late-ms`` moves each event's time back by up to that many ms (uniform),
so most reads are late (arrival order is not time order) and take their
resolution tile from the raw bucket.

Usage: ``python bench/hotkey.py [--rate 200] [--seconds 100] [--windows 5]
[--late-ms 0]``.

Measured with it: bench/HISTORY.md ("sixth session").
"""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: ``(label, aggregate)`` per row: global Counts whose resolution (SPEC §3.2) gives raw buckets of 15 s, 60 s, 1 hour,
#: and a ``Decayed*`` state (raw tiles of its own, ``lua.py`` ``decay_write``).
STATES = (
    ("Count, 1 minute (r 1 s, bucket 15 s)", "Count(last 1 minute)"),
    ("Count, 1 day (r 1 min, bucket 60 s)", "Count(last 1 day)"),
    ("Count, 90 days (r 1 h, bucket 1 h)", "Count(last 90 days)"),
    ("DecayedCount, 1 day (r 1 min, bucket 60 s)", "DecayedCount(last 1 day)"),
)

#: Event time of the first event (epoch ms; 2025-11-24T16:00:00Z, a whole hour: the 1-hour bucket starts empty).
T0_MS = 1_764_000_000_000


def events(rate: float, seconds: float, late_ms: int, seed: int = 0) -> list[dict]:
    """``rate * seconds`` events of type ``txn``, ``1000 / rate`` ms apart, each moved back by up to ``late_ms`` ms.

    Args:
        rate: events per second of event time.
        seconds: event time covered (s).
        late_ms: the largest backward move of an event's time (ms; 0: in time order).
        seed: the moves' seed.

    Returns:
        The events, in arrival order.
    """
    rng = random.Random(seed)
    n = int(rate * seconds)
    return [{"_type": "txn", "_time": T0_MS + int(i * 1000 / rate) - (rng.randint(0, late_ms) if late_ms else 0),
             "amount": 1.5} for i in range(n)]


def measure(aggregate: str, evs: list[dict], windows: int, repeat: int) -> tuple[list[float], int]:
    """Valkey CPU µs per call in each of ``windows`` slices of the calls of ``evs``, and the largest raw field.

    Args:
        aggregate: the aggregate (``c := <aggregate>`` of a ``txn`` event with an ``amount``).
        evs: the events, in arrival order.
        windows: slices of the calls.
        repeat: runs per slice (the least is kept), each on a store holding the calls before it.

    Returns:
        ``(µs per call per slice, bytes of the largest upper-case (raw bucket) hash field at the end)``.
    """
    import redis

    from bench.lua_calls import capture_calls, replay_us
    from compiler import compile_sources
    from scowl.embedded import EmbeddedStore

    plan = compile_sources({"t.scowl": f"event txn\namount := $.amount as float\nc := {aggregate}\n"}).plan
    with tempfile.TemporaryDirectory() as home, EmbeddedStore(home, persist=False) as store:
        calls = [c[1:] for c in capture_calls(plan, evs, store.url)]
        client = redis.Redis.from_url(store.url)
        size = -(-len(calls) // windows)
        slices = [calls[i:i + size] for i in range(0, len(calls), size)]
        best = [float("inf")] * len(slices)
        for _ in range(repeat):
            client.flushall()
            for j, part in enumerate(slices):
                best[j] = min(best[j], replay_us(client, part, 50))
        largest = 0
        for key in client.scan_iter(match="sc:*"):
            if client.type(key) == b"hash":
                for f, v in client.hgetall(key).items():
                    if f[:1].isupper():
                        largest = max(largest, len(v))
        client.close()
    return best, largest


def main(argv: list[str] | None = None) -> None:
    """Print the table (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rate", type=float, default=200.0, help="events per second of event time, all on one key")
    ap.add_argument("--seconds", type=float, default=100.0, help="event time covered (s)")
    ap.add_argument("--windows", type=int, default=5, help="slices of the calls measured in turn")
    ap.add_argument("--repeat", type=int, default=2, help="runs per slice (the least is shown)")
    ap.add_argument("--late-ms", type=int, default=0, help="move each event's time back by up to this many ms")
    args = ap.parse_args(argv)
    if args.windows < 2:
        ap.error("--windows must be at least 2 (the first slice is the floor)")

    from rich.console import Console
    from rich.table import Table

    evs = events(args.rate, args.seconds, args.late_ms)
    table = Table(title=f"Valkey CPU per call, one global key: {len(evs):,} events at {args.rate:g}/s of event time "
                        f"({args.seconds:g} s){f', up to {args.late_ms} ms late' if args.late_ms else ''}; "
                        f"floor: the first of {args.windows} slices")
    for col in ("global state", "floor µs/call", "last µs/call", "last / floor", "largest raw field"):
        table.add_column(col, justify="left" if col.startswith("global") else "right")
    for label, aggregate in STATES:
        per, largest = measure(aggregate, evs, args.windows, args.repeat)
        table.add_row(label, f"{per[0]:.1f}", f"{per[-1]:.1f}", f"{per[-1] / per[0]:.2f}x", f"{largest:,} B")
    Console().print(table)


if __name__ == "__main__":
    main()
