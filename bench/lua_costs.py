"""The cost model of Lua inside Valkey: CPU per primitive a generated script uses (issue 10).

``bench/lua_calls.py`` says how much Valkey CPU each event type's script
costs; this script says what such a script is made of. It runs small Lua
scripts against a private Valkey (the embedded binary, hashes of
``--fields`` fields, hashtable-encoded as ``scowl.embedded`` configures),
each ``--calls`` times pipelined, and prints the Valkey CPU (``INFO cpu``
delta, the least of ``--repeat`` runs, the rows interleaved run by run) per
call beside an empty script, and per unit of what the row varies:

* ``redis.call`` overhead: 1 vs 21 ``HGET`` of one literal field;
* ``HMGET`` of 10/50/200 literal fields (no names built in Lua; the values
  come back as Lua strings): the cost per field moved;
* the same 50 names built in Lua (``'m' .. string.format('%d', i)``, as
  ``common.lua`` ``emit`` builds a cover): the cost per string created;
* ``tonumber`` over 50 values and ``HSET`` of 10/50 fields;
* ``PEXPIRE``, ``ZADD`` + ``ZREMRANGEBYSCORE`` (a write log's write) and
  ``ZREVRANGEBYSCORE ... LIMIT 0 5`` (its read);
* the same 50-name ``HMGET`` as a Valkey *function* (``FUNCTION LOAD``,
  ``FCALL``): names built per call, and names kept in a table local to the
  library, which outlives the call (a library's top-level code runs once
  at load; ``EVAL`` scripts cannot keep anything between calls), so a
  name is built once per server, not once per read.

Use it before designing a change to ``compiler/algebra/lua.py``: a design
that trades fields for calls or strings pays at these rates.

Usage: ``python bench/lua_costs.py [--calls 4000] [--repeat 5] [--fields 300]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _names(n: int) -> str:
    return ", ".join(f"'m{28_000_000 + i}'" for i in range(1, n + 1))


def scripts() -> list[tuple[str, str, int, str]]:
    """The measured scripts: ``(label, Lua body, units, unit name)``; per-unit cost = (script - base) / units.

    The ``base`` of a row is the empty script, except where the label says
    ``vs`` another row (then that row's cost is subtracted).
    """
    hmget50 = f"local v = redis.call('HMGET', KEYS[1], {_names(50)})"
    return [
        ("empty script", "return 1", 1, "call"),
        ("1 HGET", "redis.call('HGET', KEYS[1], 'm28000001') return 1", 1, "call"),
        ("21 HGET", "for i = 1, 21 do redis.call('HGET', KEYS[1], 'm28000001') end return 1", 21, "call"),
        ("HMGET 10 literal fields", f"redis.call('HMGET', KEYS[1], {_names(10)}) return 1", 10, "field"),
        ("HMGET 50 literal fields", f"{hmget50} return 1", 50, "field"),
        ("HMGET 200 literal fields", f"redis.call('HMGET', KEYS[1], {_names(200)}) return 1", 200, "field"),
        ("HMGET 50 names built in Lua",
         "local f = {} for i = 1, 50 do f[i] = 'm' .. string.format('%d', 28000000 + i) end "
         "redis.call('HMGET', KEYS[1], unpack(f)) return 1", 50, "field"),
        ("HMGET 50 + tonumber each",
         f"{hmget50} local s = 0 for i = 1, 50 do s = s + tonumber(v[i]) end return 1", 50, "field"),
        ("HSET 10 literal fields",
         "redis.call('HSET', KEYS[1], " + ", ".join(f"'m{28_000_000 + i}', '7'" for i in range(1, 11)) + ") return 1",
         10, "field"),
        ("HSET 50 literal fields",
         "redis.call('HSET', KEYS[1], " + ", ".join(f"'m{28_000_000 + i}', '7'" for i in range(1, 51)) + ") return 1",
         50, "field"),
        ("PEXPIRE", "redis.call('PEXPIRE', KEYS[1], '86460000') return 1", 1, "call"),
        ("ZADD + ZREMRANGEBYSCORE (log write)",
         "redis.call('ZADD', KEYS[2], ARGV[1], ARGV[1] .. ':x') "
         "redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', ARGV[1] - 1000000) return 1", 1, "write"),
        ("ZREVRANGEBYSCORE LIMIT 0 5 (log read)",
         "redis.call('ZREVRANGEBYSCORE', KEYS[2], ARGV[1], 0, 'WITHSCORES', 'LIMIT', 0, 5) return 1", 1, "read"),
    ]


#: A function library for the ``FCALL`` rows: ``names_fresh`` builds the 50 names per call,
#: ``names_kept`` keeps each one in ``NAMES`` (a library-level table: it persists between calls).
LIBRARY = r"""#!lua name=scowl_lua_costs
local NAMES = {}
redis.register_function('names_fresh', function(keys, args)
  local f = {}
  for i = 1, 50 do f[i] = 'm' .. string.format('%d', 28000000 + i) end
  redis.call('HMGET', keys[1], unpack(f))
  return 1
end)
redis.register_function('names_kept', function(keys, args)
  local f = {}
  for i = 1, 50 do
    local q = 28000000 + i
    local s = NAMES[q]
    if not s then s = 'm' .. string.format('%d', q); NAMES[q] = s end
    f[i] = s
  end
  redis.call('HMGET', keys[1], unpack(f))
  return 1
end)
redis.register_function('empty', function(keys, args) return 1 end)
"""

#: ``FCALL`` rows: (label, function, units, unit); their base is the empty function.
FUNCTION_ROWS = [
    ("FCALL empty function", "empty", 1, "call"),
    ("FCALL HMGET 50 names built per call", "names_fresh", 50, "field"),
    ("FCALL HMGET 50 names kept by the library", "names_kept", 50, "field"),
]


def main() -> None:
    """Run every script ``--repeat`` times (interleaved), print the least CPU per call and per unit."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--calls", type=int, default=4000, help="calls per measurement")
    ap.add_argument("--repeat", type=int, default=5, help="measurements per row (the least is shown)")
    ap.add_argument("--fields", type=int, default=300, help="fields per hash (tile fields of a busy state)")
    args = ap.parse_args()

    import redis
    from rich.console import Console
    from rich.table import Table

    from bench.lua_calls import cpu_s
    from scowl.embedded import EmbeddedStore

    rows = scripts()
    best = {label: float("inf") for label, *_ in rows}
    with tempfile.TemporaryDirectory() as home, EmbeddedStore(home, persist=False) as store:
        client = redis.Redis.from_url(store.url)
        for k in range(50):
            client.hset(f"h{k}", mapping={f"m{28_000_000 + i}": str(7 * i) for i in range(1, args.fields + 1)})
        shas = {label: client.script_load(body) for label, body, _, _ in rows}
        client.execute_command("FUNCTION", "LOAD", "REPLACE", LIBRARY)
        calls = {label: ("EVALSHA", shas[label]) for label in shas}
        calls.update({label: ("FCALL", fn) for label, fn, _, _ in FUNCTION_ROWS})
        best.update({label: float("inf") for label, *_ in FUNCTION_ROWS})
        for _ in range(args.repeat):
            for label, (command, name) in calls.items():
                pipe = client.pipeline(transaction=False)
                before = cpu_s(client)
                for i in range(args.calls):
                    pipe.execute_command(command, name, 2, f"h{i % 50}", f"z{i % 50}", 1_700_000_000_000 + i * 1000)
                    if i % 100 == 99:
                        pipe.execute()
                pipe.execute()
                best[label] = min(best[label], (cpu_s(client) - before) / args.calls * 1e6)
        client.close()
    empty = best["empty script"]
    table = Table(title=f"Valkey CPU per script call ({args.calls:,} calls pipelined 100 per round trip, least of "
                        f"{args.repeat}; hashes of {args.fields} fields)")
    for col in ("script", "µs/call", "− empty", "per unit"):  # (FCALL rows: − the empty function)
        table.add_column(col, justify="left" if col == "script" else "right")
    for label, _, units, unit in rows:
        extra = best[label] - empty
        per = "" if label == "empty script" else f"{extra / units:.2f} µs/{unit}"
        table.add_row(label, f"{best[label]:.1f}", f"{extra:.1f}", per)
    empty_fn = best["FCALL empty function"]
    for label, _, units, unit in FUNCTION_ROWS:
        extra = best[label] - empty_fn
        per = "(the base of the FCALL rows)" if units == 1 else f"{extra / units:.2f} µs/{unit}"
        table.add_row(label, f"{best[label]:.1f}", f"{extra:.1f}", per)
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
