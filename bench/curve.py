"""The states curve: serving cost against the number of aggregate states per event.

For each ``n`` of ``--states`` (default 10, 30, 70, 100) the wide topology
of ``bench/wide.py`` with ``n`` states (``wide_topology(n)``: the same mix of
functions, keys, windows and filters, one event type reading and writing
all ``n``) is written to a temporary directory and served by
``bench.apps:scowl_app`` (one uvicorn worker) over a flushed embedded
Valkey, fed the same ``bench.wide.wide_events``. Measured as in
``bench/serve.py`` (whose machinery this reuses), beside a bare-FastAPI
floor measured in the same run:

* ``max ev/s`` and ``× bare``: closed loop (wrk when on PATH);
* ``p50``/``p99`` at ``--rate`` events/s: open loop, latency from the
  intended send time (``*``: the server fell behind the rate; ``over max``:
  the rate is above the max and was not run);
* ``Valkey ms/ev``, ``worker ms/ev``: CPU per answered event in the
  max-events/s phase;
* memory, after all phases: ``keys`` (``DBSIZE``), ``B/key`` (mean
  ``MEMORY USAGE key SAMPLES 0`` over up to ``--sample`` keys found by
  ``SCAN``), ``entries/key`` (``HLEN`` of hashes -- tile fields --, ``ZCARD``
  of sorted sets -- logs --, ``LLEN``/``SCARD`` of others, averaged over the
  same sample), ``B/entry`` (the sample's bytes over its entries),
  ``types`` (how the sample splits by type), and ``used MB`` (``INFO
  memory`` ``used_memory`` after the row minus after the flush);
* ``other load``: CPU of other jobs on the machine during the row
  (``bench/serve.py``; ``!`` from 10% of a core: a noisy row).

The events played differ per row (a faster row plays more of them), so
compare the memory per key and per entry across rows, not the totals.

Usage: ``python bench/curve.py [--states 10,30,70,100] [--rate 100]
[--seconds 8]``.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from bench import serve  # noqa: E402
from bench.wide import wide_events, write_topology  # noqa: E402


@dataclass
class Memory:
    """Store memory after a row (module docstring).

    Attributes:
        keys: ``DBSIZE``.
        sampled: keys measured.
        bytes_per_key: mean ``MEMORY USAGE`` of the sampled keys (bytes).
        entries_per_key: mean entries (hash fields, sorted-set members, ...)
            of the sampled keys.
        bytes_per_entry: the sample's bytes over its entries.
        types: sampled keys by Redis type.
        used_mb: ``used_memory`` growth since the flush, MiB.
    """

    keys: int
    sampled: int
    bytes_per_key: float
    entries_per_key: float
    bytes_per_entry: float
    types: Counter
    used_mb: float


_LENGTH = {"hash": "hlen", "zset": "zcard", "list": "llen", "set": "scard", "string": "strlen"}


def store_memory(url: str, baseline_bytes: int, sample: int) -> Memory:
    """Measure the store at ``url`` (:class:`Memory`).

    Args:
        url: the store.
        baseline_bytes: ``used_memory`` right after the flush.
        sample: at most this many keys (the first ``SCAN`` returns) are
            measured with ``MEMORY USAGE ... SAMPLES 0`` (exact).
    """
    import redis

    client = redis.Redis.from_url(url)
    keys = []
    for k in client.scan_iter(count=1000):
        keys.append(k)
        if len(keys) >= sample:
            break
    types: Counter = Counter()
    total_bytes = total_entries = 0
    pipe = client.pipeline(transaction=False)
    for k in keys:
        pipe.type(k)
        pipe.memory_usage(k, samples=0)
    answers = pipe.execute()
    pipe = client.pipeline(transaction=False)
    for k, t, size in zip(keys, answers[0::2], answers[1::2]):
        t = t.decode()
        types[t] += 1
        total_bytes += size or 0
        pipe.execute_command(_LENGTH.get(t, "strlen").upper(), k)
    total_entries = sum(pipe.execute())
    n = max(1, len(keys))
    return Memory(client.dbsize(), len(keys), total_bytes / n, total_entries / n,
                  total_bytes / max(1, total_entries), types,
                  (client.info("memory")["used_memory"] - baseline_bytes) / 2**20)


def curve_row(n: int, directory: Path, store_url: str, bodies: list[bytes], opts: serve.Options,
              sample: int) -> tuple[serve.Row, Memory]:
    """Serve ``wide_topology(n)`` from ``directory`` on a flushed store; measure it and then its memory."""
    import redis

    from compiler import compile_dir

    write_topology(directory, n)
    result = compile_dir(directory)
    if not result.plan:
        raise RuntimeError(result.render())
    events = [orjson.loads(b) for b in bodies[:1000]]
    states = serve.states_per_event(result.plan, events)
    client = redis.Redis.from_url(store_url)
    serve.flush(store_url)
    baseline = client.info("memory")["used_memory"]
    row = serve.Row(f"wide, {n} states", states)
    port = serve.free_port()
    proc = serve.start_server("bench.apps:scowl_app", port,
                              {"SCOWL_REDIS_URL": store_url, "SCOWL_TOPOLOGY": str(directory)})
    cursor = serve.Bodies(bodies)
    try:
        serve.measure_http(row, port, cursor, serve.Probe(store_url, proc.pid), opts)
    finally:
        serve.stop_server(proc)
    row.wrapped = cursor.wraps > 0
    return row, store_memory(store_url, baseline, sample)


def render(rows: list[tuple[serve.Row, Memory | None]], rate: float, title: str):
    """Build the rich table (ratios against the first row, the bare-FastAPI floor)."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    cols = ["scenario", "states/ev", "max ev/s", "× bare", f"p50 ms\n@{rate:g}/s", f"p99 ms\n@{rate:g}/s",
            "Valkey\nms/ev", "worker\nms/ev", "keys", "B/key", "entries\n/key", "B/entry", "types (sample)",
            "used MB", "other\nload"]
    for c in cols:
        table.add_column(c, justify="left" if c in ("scenario", "types (sample)") else "right")
    base = rows[0][0].max_phase.per_s if rows and rows[0][0].max_phase else float("nan")
    for row, mem in rows:
        if row.error:
            table.add_row(row.name, *[""] * (len(cols) - 2), f"failed: {row.error}")
            continue
        mp = row.max_phase
        ph = row.rates.get(rate)
        if ph is None:
            lat = ["over max", ""]
        else:
            mark = "*" if ph.saturated else ""
            lat = [f"{ph.pct(50):.2f}{mark}", f"{ph.pct(99):.2f}{mark}"]
        cells = [row.name + (" (events wrapped)" if row.wrapped else ""),
                 f"{row.states[0]:.0f}" if row.states else "—", f"{mp.per_s:,.0f}", f"{mp.per_s / base:.3f}x",
                 *lat, f"{mp.ms_per_event(mp.usage.valkey_cpu_s):.3f}",
                 f"{mp.ms_per_event(mp.usage.server_cpu_s):.3f}"]
        if mem is None:
            cells += ["—"] * 6
        else:
            cells += [f"{mem.keys:,}", f"{mem.bytes_per_key:.0f}", f"{mem.entries_per_key:.1f}",
                      f"{mem.bytes_per_entry:.1f}",
                      ", ".join(f"{t} {c / max(1, mem.sampled):.0%}" for t, c in mem.types.most_common()),
                      f"{mem.used_mb:.1f}"]
        table.add_row(*cells, serve.fmt_other_load(row.other_cpu_pct()))
    return table


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    serve.add_load_args(ap)
    ap.add_argument("--states", default="10,30,70,100", help="aggregate states per event, comma-separated")
    ap.add_argument("--rate", type=float, default=100.0, help="open-loop offered rate, events/s")
    ap.add_argument("--sample", type=int, default=2000, help="keys measured with MEMORY USAGE per row")
    args = ap.parse_args(argv)

    from rich.console import Console

    from scowl.embedded import EmbeddedStore

    sizes = [int(x) for x in args.states.split(",") if x.strip()]
    bodies = [orjson.dumps(e) for e in wide_events(args.events)]
    console = Console(width=max(180, shutil.get_terminal_size((180, 40)).columns))
    rows: list[tuple[serve.Row, Memory | None]] = []
    with tempfile.TemporaryDirectory() as home, EmbeddedStore(home, persist=False) as store:
        opts = serve.options(args, [args.rate], Path(home))
        rows.append((serve.safely(lambda: serve.bare_row(store.url, bodies, opts, 1), "bare FastAPI"), None))
        for n in sizes:
            try:
                rows.append(curve_row(n, Path(home) / f"wide{n}", store.url, bodies, opts, args.sample))
            except Exception as exc:  # noqa: BLE001 -- reported in the table
                rows.append((serve.Row(f"wide, {n} states", error=f"{type(exc).__name__}: {exc}"[:200]), None))
            console.print(f"[dim]done: {n} states[/dim]")
    title = (f"The states curve: wide topology (bench/wide.py) with n states per event, one worker; max events/s "
             f"(closed loop, {opts.concurrency} connections, client {opts.client}), p50/p99 at {args.rate:g} events/s "
             f"(open loop, {opts.pool} connections); {opts.seconds:g} s per phase after {opts.warmup:g} s warm-up")
    console.print(render(rows, args.rate, title))
    console.print("* the server fell behind the offered rate.  ms/ev: CPU ms per answered event in the max-events/s "
                  "phase.  Memory after all phases; entries = hash fields (tiles), sorted-set members (logs).  "
                  "other load: other jobs' CPU during the row, % of a core (! from 10%).")


if __name__ == "__main__":
    main()
