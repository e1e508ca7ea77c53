"""What fusing the running totals of one entity key's states into one sorted set would save (a layout probe).

Today each aggregate state written online keeps its own running members in
its own sorted set (``compiler.algebra.lua``: ``pc_write``/``pc_read`` for
``Count``): per event and state, a write is a lookup of the newest member, an
add and an expiry, and a read one more lookup at the window's edge -- about
four store commands per state, ~1 µs each with the Lua conversions, before
any arithmetic. The wide topology's 70 states per event cost ~0.9 ms of
Valkey CPU per event that way (issue 10 asks for 0.5 ms).

This script measures, on an embedded Valkey, the two layouts of ``K``
``Count``-like states of one entity key written and read by every event, in
time order, one script call per event:

* **separate**: one sorted set per state (today's layout, reduced to its
  commands: ``ZREVRANGE`` of the newest member, ``ZADD``, ``PEXPIRE``,
  ``ZREVRANGEBYSCORE`` at the window's edge);
* **fused**: one sorted set for the ``K`` states, each member
  ``<ms>|<c1><c2>..<cK>``, every count zero-padded to 15 digits so that a
  state's component is read at a fixed offset without parsing the others;
  one newest-member lookup, one add and one expiry per event, and one edge
  lookup per *distinct window* among the states.

* **shared** (thirty-second session): one sorted set for the ``K`` states,
  each state's own members (today's) in a score band of its own (state
  ``i``'s scores ``i * 2^42 + ms``): per state a newest-member lookup and an
  edge lookup in its band, as today, but one ``ZADD`` of every state's
  member and one ``PEXPIRE`` per event. Members stay per state, so nothing
  is parsed beyond today's; what a real layout must add: bands assigned
  stably per definition hash (SPEC §5.4), pruning per band, dropping the
  bands of states no longer written, the writer's side.

All give the same counts (asserted). Printed: Valkey CPU per call (``INFO
cpu`` delta over the second half of the events, calls pipelined 50 per
round trip) for each layout, and the ratio, for all-distinct and shared
windows. Which rows apply: only running-total states (``Count``, ``Sum``,
``Average``, ``Decayed*`` without ``limit``) fuse this simply, and they are
27 of the wide topology's 70 states, in 7 (event type, write key) groups of
about 4 (the 5-state row), and 10 of the demo's 20 (7 on departures by
origin). What a real fused layout must add is not measured here: members
addressed by each state's definition hash (SPEC §5.4), thinning and pruning
per group, the ladder of backfill and the stream, and memory (a member
holds ``K`` components). The twenty-third session built that layout
(branch ``experiment/fused-running-totals``: bands keyed by definition hash,
carried by every write): 64 commands per departure instead of 73.5, but
1.11-1.14x the Valkey CPU per demo call and 1.03x per wide one
(``bench/lua_ab.py``), its members' parsing and rebuilding costing more Lua
than the commands saved (bench/HISTORY.md): this probe's fixed offsets are
what made it cheap, and a real layout cannot keep them.

Usage: ``python bench/fused_state.py [--events 6000]``.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

#: Today's layout: one sorted set per state (KEYS), counts as zero-padded members (pc_write/pc_read's core).
SEPARATE = r"""
local t, ts, out = tonumber(ARGV[1]), ARGV[1], {}
for i = 1, #KEYS do
  local z = KEYS[i]
  local top = redis.call('ZREVRANGE', z, 0, 0)
  local c = top[1] and tonumber(top[1]) or 0
  redis.call('ZADD', z, ts, string.format('%015d', c + 1))
  redis.call('PEXPIRE', z, 90000000)
  local b = redis.call('ZREVRANGEBYSCORE', z, string.format('%d', t - tonumber(ARGV[1 + i])), '-inf', 'LIMIT', 0, 1)[1]
  out[i] = c + 1 - (b and tonumber(b) or 0)
end
return out
"""

#: One sorted set for K states: member '<ms>|' then each count in 15 digits (a fixed offset per state).
FUSED = r"""
local t, ts, k, z = tonumber(ARGV[1]), ARGV[1], tonumber(ARGV[2]), KEYS[1]
local m, cs = redis.call('ZREVRANGE', z, 0, 0)[1], {}
if m then
  local o = string.find(m, '|', 1, true)
  for i = 1, k do cs[i] = tonumber(string.sub(m, o + 1 + (i - 1) * 15, o + i * 15)) end
else
  for i = 1, k do cs[i] = 0 end
end
local parts = {}
for i = 1, k do cs[i] = cs[i] + 1; parts[i] = string.format('%015d', cs[i]) end
redis.call('ZADD', z, ts, ts .. '|' .. table.concat(parts))
redis.call('PEXPIRE', z, 90000000)
local out, edge = {}, {}
for i = 1, k do
  local w = ARGV[2 + i]
  local b = edge[w]
  if b == nil then
    b = redis.call('ZREVRANGEBYSCORE', z, string.format('%d', t - tonumber(w)), '-inf', 'LIMIT', 0, 1)[1] or false
    edge[w] = b
  end
  if b then
    local o = string.find(b, '|', 1, true)
    out[i] = cs[i] - tonumber(string.sub(b, o + 1 + (i - 1) * 15, o + i * 15))
  else
    out[i] = cs[i]
  end
end
return out
"""

#: One sorted set for K states, each keeping its own members in a score band of its own: state i's member
#: '<i, 3 digits>:<count in 15 digits>' scored i * 2^42 + ms (ms < 2^42 until 2109; i < 2^11 keeps the scores
#: exact doubles). Per event: a newest-member lookup and a window-edge lookup per state (in its band), as
#: today, but one ZADD of every state's member and one PEXPIRE for the key. The bands' bounds and member
#: prefixes come as texts in ARGV (a generated script's constants), so the Lua formats two numbers per state.
SHARED = r"""
local t, k, z = tonumber(ARGV[1]), tonumber(ARGV[2]), KEYS[1]
local adds, cs, out = {}, {}, {}
for i = 1, k do
  -- ARGV after the windows: per state its band's low score, high score and member prefix (texts made by the
  -- caller once, as a generated script would hold them as constants)
  local b = 2 + k + 3 * (i - 1)
  local lo, pre = ARGV[b + 1], ARGV[b + 3]
  local m = redis.call('ZREVRANGEBYSCORE', z, ARGV[b + 2], lo, 'LIMIT', 0, 1)[1]
  local c = (m and tonumber(string.sub(m, 5)) or 0) + 1
  cs[i] = c
  adds[2 * i - 1] = string.format('%d', tonumber(lo) + t)
  adds[2 * i] = pre .. string.format('%015d', c)
end
redis.call('ZADD', z, unpack(adds))
redis.call('PEXPIRE', z, 90000000)
for i = 1, k do
  local lo = ARGV[2 + k + 3 * (i - 1) + 1]
  local b = redis.call('ZREVRANGEBYSCORE', z, string.format('%d', tonumber(lo) + t - tonumber(ARGV[2 + i])), lo, 'LIMIT', 0, 1)[1]
  out[i] = cs[i] - (b and tonumber(string.sub(b, 5)) or 0)
end
return out
"""

#: (label, windows in ms, one per state)
CASES = [
    ("10 states, 10 windows", [60_000 * (i + 1) for i in range(10)]),
    ("10 states, 2 windows", [3_600_000] * 5 + [86_400_000] * 5),
    ("20 states, 4 windows", [60_000 * (i % 4 + 1) for i in range(20)]),
    ("5 states, 5 windows", [300_000, 900_000, 3_600_000, 86_400_000, 604_800_000]),
]


def measure(client, windows: list[int], events: int, batch: int = 50) -> dict[str, tuple[float, list]]:
    """Valkey CPU µs per call of each layout on ``events`` events 1 s apart, and its last answer.

    Returns:
        ``{layout: (µs per call over the second half of the events, last call's counts)}``.
    """
    sep, fused, shared = client.script_load(SEPARATE), client.script_load(FUSED), client.script_load(SHARED)
    k = len(windows)
    band = 1 << 42
    bands = [x for i in range(k) for x in (str(i * band), str((i + 1) * band - 1), f"{i:03d}:")]
    out = {}
    for name in ("separate", "fused", "shared"):
        client.flushall()
        keys = [f"p:{{u1}}:{i}:z" for i in range(k)]
        start = None
        last: list = []
        for j in range(0, events, batch):
            if j >= events // 2 and start is None:
                start = _cpu(client)
            p = client.pipeline(transaction=False)
            for e in range(j, min(events, j + batch)):
                t = 1_700_000_000_000 + 1000 * e
                if name == "separate":
                    p.evalsha(sep, k, *keys, t, *windows)
                elif name == "fused":
                    p.evalsha(fused, 1, "p:{u1}:f:z", t, k, *windows)
                else:
                    p.evalsha(shared, 1, "p:{u1}:s:z", t, k, *windows, *bands)
            last = p.execute()[-1]
        out[name] = ((_cpu(client) - start) / (events - events // 2) * 1e6, last)
    return out


def _cpu(client) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def main(argv: list[str] | None = None) -> None:
    """Print the table (module docstring)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--events", type=int, default=6000, help="events per layout and case (the second half measured)")
    args = ap.parse_args(argv)

    import redis
    from rich.console import Console
    from rich.table import Table

    from scowl.embedded import EmbeddedStore

    table = Table(title="Valkey CPU per event call: K Count states of one entity key, written and read by every event")
    for col in ("case", "separate µs/call", "fused µs/call", "fused / separate", "shared µs/call",
                "shared / separate"):
        table.add_column(col, justify="left" if col == "case" else "right")
    with tempfile.TemporaryDirectory() as home, EmbeddedStore(home, persist=False) as store:
        client = redis.Redis.from_url(store.url)
        for label, windows in CASES:
            got = measure(client, windows, args.events)
            (s_us, s_last), (f_us, f_last), (h_us, h_last) = got["separate"], got["fused"], got["shared"]
            if not s_last == f_last == h_last:
                raise SystemExit(f"{label}: the layouts disagree: {s_last}, {f_last}, {h_last}")
            table.add_row(label, f"{s_us:.1f}", f"{f_us:.1f}", f"{f_us / s_us:.2f}x", f"{h_us:.1f}",
                          f"{h_us / s_us:.2f}x")
    Console(width=120).print(table)


if __name__ == "__main__":
    main()
