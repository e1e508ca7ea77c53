"""What a generated round script's Valkey time would be with no Lua work: its commands alone (issue 10).

``bench/lua_ab.py --callgrind --functions`` splits a script call's
*instructions* between the Lua and the ``redis.call`` bridge; this script
splits its *time*. For the calls of one event type:

1. evaluates ``--events`` events through ``serving.evaluate.Evaluator`` on a
   private store, capturing every round-script call (``bench/lua_calls.py``
   ``capture_calls``), and runs them again on a second private store, the
   last ``--capture`` events' calls through the traced copy of their script
   (``bench/lua_profile.py``'s tracer), which records every command each
   call made;
2. starts two more private stores, rebuilds the prefix's state on both, and
   replays the captured calls in chunks of ``--chunk``, alternating the two
   stores chunk by chunk (each first in turn): on one the generated script,
   on the other one ``EVALSHA`` per call of a script with no Lua work -- a
   loop that ``redis.call``\\ s the commands the generated script made for
   that call, passed in ``ARGV`` -- summing each store's CPU (``INFO cpu``)
   over its chunks;
3. checks that both stores hold the same data afterwards (every key's type
   and contents), so the loop did the script's work.

Printed per round: µs of Valkey CPU per call for both and their ratio: the
share of a call's time that is the commands and their bridge from Lua (the
loop's own work, a ``tonumber`` and an ``unpack`` per command, counted in
it). On 2026-12-02, 300 wide calls after 1,200: 0.86-0.92 (bench/HISTORY.md,
thirty-second session): the Lua's own work ~10-15% of a wide call's time.

The measured events must make calls of one event type and round only (the
wide topology's ``txn``): replaying other calls apart from them would change
the state the recorded commands were made for.

Needs ``lupa`` (``pip install -e '.[bench]'``), as ``bench/lua_profile.py``.

Usage: ``python bench/lua_bridge.py [--topology bench/topology_wide] [--event txn] [--events 1500]
[--capture 300] [--chunk 50] [--rounds 3]``.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: The script with no Lua work: ``ARGV`` = command count, then per command its length and its words.
REPLAY = """local i, n = 2, tonumber(ARGV[1])
for c = 1, n do
  local k = tonumber(ARGV[i])
  redis.call(unpack(ARGV, i + 1, i + k))
  i = i + k + 1
end
return 1
"""


def replay_argv(trace) -> list[str]:
    """The ``ARGV`` of :data:`REPLAY` for one traced call (a lupa table ``{trace = {{{cmd, ..}, reply}, ..}}``)."""
    words: list = []
    commands = trace["trace"]
    for k in range(1, len(commands) + 1):
        cmd = commands[k][1]
        parts = [cmd[m] for m in range(1, len(cmd) + 1)]
        words += [str(len(parts))] + [p if isinstance(p, (bytes, str)) else repr(p) for p in parts]
    return [str(len(commands))] + words


def store_digest(client) -> tuple[int, str]:
    """``(keys, md5 of every key's name, type and contents)`` of a store holding sorted sets, hashes and strings."""
    h = hashlib.md5()
    keys = sorted(client.scan_iter(count=1000))
    for k in keys:
        t = client.type(k)
        body = (client.zrange(k, 0, -1, withscores=True) if t == b"zset"
                else sorted(client.hgetall(k).items()) if t == b"hash" else client.get(k))
        h.update(k + t + repr(body).encode())
    return len(keys), h.hexdigest()[:12]


def main(argv: list[str] | None = None) -> None:
    """Parse the arguments, capture and trace the calls, replay both forms alternated, print each round."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--topology", default="bench/topology_wide", help="topology directory, relative to the checkout")
    ap.add_argument("--event", default="txn", help="the event type whose calls are measured (the only one)")
    ap.add_argument("--events", type=int, default=1500)
    ap.add_argument("--capture", type=int, default=300, help="last events whose calls are measured")
    ap.add_argument("--chunk", type=int, default=50, help="calls per alternating chunk")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)

    import lupa
    import redis

    from bench.lua_calls import capture_calls, cpu_s, load_sources
    from bench.lua_profile import traced_source
    from bench.serve import demo_events
    from bench.wide import wide_events
    from compiler import compile_dir
    from scowl.embedded import EmbeddedStore

    plan = compile_dir(ROOT / args.topology).plan
    events = wide_events(args.events) if set(plan.events) == {"txn"} else demo_events(args.events)
    first = args.events - args.capture
    with tempfile.TemporaryDirectory() as home, EmbeddedStore(home, persist=False) as store:
        every = capture_calls(plan, events, store.url)
    measured = [j for j, c in enumerate(every) if c[0] >= first and c[1] == args.event]
    sources = {every[j][2] for j in measured}
    if len(sources) != 1:
        raise SystemExit(f"{args.event}: {len(sources)} round scripts among the measured calls; one is needed")
    traced = traced_source(sources.pop())
    lua = lupa.LuaRuntime(unpack_returned_tuples=True)
    replays: dict[int, list[str]] = {}
    with tempfile.TemporaryDirectory() as home, EmbeddedStore(home, persist=False) as store:
        client = redis.Redis.from_url(store.url)
        wanted = set(measured)
        for j, (_, _, src, keys, argv_) in enumerate(every):
            if j in wanted:
                replays[j] = replay_argv(lua.eval(client.eval(traced, len(keys), *keys, *argv_).decode()))
            else:
                client.eval(src, len(keys), *keys, *argv_)
        client.close()
    per_call = sum(int(v[0]) for v in replays.values()) / max(len(replays), 1)
    print(f"{len(measured)} calls of {args.event}, {per_call:.1f} commands each")

    if any(c[0] >= first and j not in replays for j, c in enumerate(every)):
        raise SystemExit("the measured events make calls of other event types or rounds between the measured ones; "
                         "replaying them apart would change the state: use a topology of one event type and round "
                         "(bench/topology_wide)")
    with tempfile.TemporaryDirectory() as tmp, contextlib.ExitStack() as stack:
        clients = {name: redis.Redis.from_url(stack.enter_context(EmbeddedStore(Path(tmp) / name, persist=False)).url)
                   for name in ("script", "no Lua")}
        totals = {name: [0.0, 0] for name in clients}
        for rnd in range(args.rounds):
            loaded, sha = {}, {}
            for name, c in clients.items():
                c.flushall()
                loaded[name] = load_sources(c, [x[2] for x in every])
                sha[name] = c.script_load(REPLAY)
                pipe = c.pipeline(transaction=False)
                for _, _, src, keys, argv_ in (x for x in every if x[0] < first):
                    command, fn = loaded[name][src]
                    pipe.execute_command(command, fn, len(keys), *keys, *argv_)
                pipe.execute()
            for n, at in enumerate(range(0, len(measured), args.chunk)):
                part = measured[at:at + args.chunk]
                for name in (("script", "no Lua") if n % 2 == 0 else ("no Lua", "script")):
                    c = clients[name]
                    pipe = c.pipeline(transaction=False)
                    for j in part:
                        _, _, src, keys, argv_ = every[j]
                        if name == "script":
                            command, fn = loaded[name][src]
                            pipe.execute_command(command, fn, len(keys), *keys, *argv_)
                        else:
                            pipe.evalsha(sha[name], 0, *replays[j])
                    before = cpu_s(c)
                    pipe.execute()
                    totals[name][0] += cpu_s(c) - before
                    totals[name][1] += len(part)
            digests = {name: store_digest(c) for name, c in clients.items()}
            us = {name: t / max(k, 1) * 1e6 for name, (t, k) in totals.items()}
            print(f"round {rnd + 1}: script {us['script']:.1f} µs/call, no Lua {us['no Lua']:.1f} µs/call, "
                  f"no Lua / script {us['no Lua'] / us['script']:.3f}; stores "
                  f"{'equal' if digests['script'] == digests['no Lua'] else 'DIFFER'} ({digests['script'][0]:,} keys)")


if __name__ == "__main__":
    main()
