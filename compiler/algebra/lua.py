"""The Lua target of the algebra: one generated script per event type and round (SPEC §5.2).

``event.lua`` is an interpreter: every event sends a flat op list (opcodes,
field names, tile sizes, component suffixes, TTLs), ~500 arguments for a
flights departure, and the script walks it. This module generates, once per
(event type, round) from the plan, a straight-line script in which all of
that is constant, the way sqlglot generates SQL per dialect. Per event the
script receives only what varies:

* ``KEYS``: ``[id key or "", stream key or "", one Redis key per slot]``,
  where the slots are the round's reads before its writes, its writes, and
  its reads after them, in :class:`RoundSpec` order. An empty key skips its
  slot (a null entity key, a write whose filter or values rule it out, or a
  write after a repeated ``_id``).
* ``ARGV``: ``[t_ms, id ttl_ms or "", stream event JSON or ""]`` followed,
  for every non-skipped slot in order, by the slot's own arguments: a read
  with ``after`` takes the after time (epoch ms, ``""`` for null); a write
  takes :meth:`LuaGenerator.write_values` of its values.

The reply is ``[id flag, one result per non-skipped read]``: the id flag is
``1`` (new or no id) or ``0`` (seen: the writes were skipped). Reads of
``Count``, ``Sum``, ``Average``, ``Min``, ``Max`` and ``First`` merge their
tile cover inside the script and return one partial aggregate
(:meth:`LuaGenerator.decode_read` turns it into the IR of ``ops``), so
neither the field list nor the tiles cross the network.

The stored layout and every update are those of ``event.lua`` and ``ops``
(same field names and texts), so backfill, stream and online writes keep
meeting in one store; one difference: a float tile sum is added as doubles
in Lua and stored as ``%.17g`` (exactly ``ops`` ``update``), where
``event.lua``'s ``F`` op uses ``HINCRBYFLOAT`` (long double, printed
fixed-point: values below 1e-17 vanish). Merges are exact: float sums add
the same doubles in the same (time) order as ``ops.*.merge`` (Lua numbers
are IEEE doubles, ``%.17g`` round-trips them); integer sums are added in
Lua only while every term and partial sum stays below 2**53, and are
otherwise returned as their field texts for Python to add as int64.

Source: SPEC §3.2 (window rule, via :func:`windows.counted_range` and
:func:`windows.cover`, reproduced here in Lua), §3.3 (exclusive reads before
the event's writes), §5.2, §5.3 (expiry and pruning).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from compiler.algebra.keys import encode_value_tuple
from compiler.algebra.ops import (
    DECAY_HORIZON,
    AggregateOp,
    AverageOp,
    CountOp,
    CountUniqueOp,
    DecayedOp,
    FirstOp,
    HyperLogLogOp,
    LatestOp,
    MaxOp,
    MinOp,
    SumOp,
    _encode_scalar,
    _g17,
    _num,
    fold,
    hll_coupon,
    parse_log_member,
    values_json,
)
from compiler.algebra.script import common_script
from compiler.algebra.windows import LEVEL_CODE, counted_range, levels_s


#: Hoisted constants kept in Lua locals (the rest go to the table ``K``); the
#: prelude's locals and these stay under Lua's 200 locals per function.
MAX_LOCAL_CONSTS = 100


@dataclass(frozen=True)
class ReadSlot:
    """One aggregate read of a round.

    Attributes:
        op: the function's algebra (``ops.make_op``).
        window_s: the window ``W`` (seconds).
        resolution_s: the resolution ``r`` (seconds).
        limit: ``limit n`` (a write-log read) or ``None``.
        has_after: the read has an ``after`` time (one ARGV element).
    """

    op: AggregateOp
    window_s: int
    resolution_s: int
    limit: int | None = None
    has_after: bool = False


@dataclass(frozen=True)
class WriteSlot:
    """One state write of a round.

    Attributes:
        op: the function's algebra.
        window_s, resolution_s, limit: as in :class:`ReadSlot`.
    """

    op: AggregateOp
    window_s: int
    resolution_s: int
    limit: int | None = None


@dataclass(frozen=True)
class RoundSpec:
    """The slots of one round, in script order (module docstring).

    Attributes:
        name: label written into the script's header (event type and round).
        reads_before: reads that run before the writes (``exclusive`` reads
            of a state the event writes).
        writes: the round's state writes.
        reads_after: the other reads (they see the event's own writes).
    """

    name: str
    reads_before: tuple[ReadSlot, ...] = ()
    writes: tuple[WriteSlot, ...] = ()
    reads_after: tuple[ReadSlot, ...] = ()


# Functions of every generated script, after common.lua (shared with event.lua).
_PRELUDE = r"""
-- covers shared by the reads of one call (LuaGenerator._cover)
local CV = {}
local function cached(slot, fields)
  CV[slot] = fields
  return fields
end

-- counted range of resolution tiles (windows.counted_range); after: text or ''
local function range(t, w, r, after)
  local lo = math.floor((t - w) / r) + 1
  if after ~= nil and after ~= '' then
    local a = math.floor(tonumber(after) / r) + 1
    if a > lo then lo = a end
  end
  return lo, math.floor(t / r)
end

local EXACT = 9007199254740992

-- integer sum of tile texts; the texts themselves when a double could round
local function sum_int(v)
  local s = 0
  for i = 1, #v do
    local x = v[i]
    if x then
      local n = tonumber(x)
      s = s + n
      if n >= EXACT or n <= -EXACT or s >= EXACT or s <= -EXACT then
        local raw = {}
        for k = 1, #v do if v[k] then raw[#raw + 1] = v[k] end end
        return raw
      end
    end
  end
  return s
end

local function sum_float(v)
  local s = 0.0
  for i = 1, #v do
    local x = v[i]
    if x then s = s + tonumber(x) end
  end
  return string.format('%.17g', s)
end

local function average(v)
  local s, c = 0.0, 0
  for i = 1, #v, 2 do
    local x, y = v[i], v[i + 1]
    if x then s = s + tonumber(x) end
    if y then c = c + tonumber(y) end
  end
  return { string.format('%.17g', s), c }
end

-- the extreme tile text (kind n/i/s; better(a, b): a replaces b)
local function extreme(v, kind, want_less)
  local best = false
  for i = 1, #v do
    local x = v[i]
    if x and (kind == 's' or x ~= '') then
      if not best then
        best = x
      elseif want_less then
        if less(x, best, kind) then best = x end
      elseif less(best, x, kind) then
        best = x
      end
    end
  end
  return best
end

local function first_of(v)
  local best, best_ms = false, nil
  for i = 1, #v do
    local x = v[i]
    if x then
      local ms = tonumber(string.match(x, '^%-?%d+'))
      if not best or ms < best_ms then best, best_ms = x, ms end
    end
  end
  return best
end

local function present(v)
  local out = {}
  for i = 1, #v do if v[i] then out[#out + 1] = v[i] end end
  return out
end

-- float sum of a tile: the double sum, stored as %.17g (round-trips exactly;
-- HINCRBYFLOAT would add in long double and print fixed-point, which drops
-- values below 1e-17)
local function add_float(key, f, v)
  local cur = redis.call('HGET', key, f)
  local x = tonumber(v)
  if cur then x = tonumber(cur) + x end
  redis.call('HSET', key, f, string.format('%.17g', x))
end

local function log_write(key, ms, json, n, keep_ms, ttl_ms)
  log_add(key, ms, next_rank(key, ms), json, n, string.format('%d', tonumber(ms) - keep_ms), ttl_ms)
end

-- tile size (ms) by the byte of its level code (windows.LEVEL_CODE)
local SIZE_OF = { [115] = 1000, [97] = 5000, [98] = 15000, [109] = 60000, [99] = 300000,
                  [101] = 900000, [104] = 3600000, [102] = 14400000, [100] = 86400000 }

local function hdel_all(key, dead)
  for i = 1, #dead, 500 do
    redis.call('HDEL', key, unpack(dead, i, math.min(i + 499, #dead)))
  end
end

-- whether the next pruning pass is due at t (the _p field); if so, set the next one
local function prune_due(key, t, every_ms)
  local due = redis.call('HGET', key, '_p')
  if due and t < tonumber(due) then return false end
  redis.call('HSET', key, '_p', string.format('%d', t + every_ms))
  return true
end

-- delete the tile fields (<code><index>[.s|.c]) that end at or before cutoff
local function prune_tiles(key, cutoff)
  local names = redis.call('HKEYS', key)
  local dead = {}
  for j = 1, #names do
    local f = names[j]
    local size = SIZE_OF[string.byte(f, 1)]
    if size then
      local idx = tonumber(string.sub(f, 2)) or tonumber(string.sub(f, 2, -3))
      if idx and (idx + 1) * size <= cutoff then dead[#dead + 1] = f end
    end
  end
  hdel_all(key, dead)
end

-- delete the CountUnique fields u<tuple> last seen at or before cutoff
local function prune_seen(key, cutoff)
  local all = redis.call('HGETALL', key)
  local dead = {}
  for j = 1, #all, 2 do
    if string.byte(all[j], 1) == 117 and tonumber(all[j + 1]) <= cutoff then dead[#dead + 1] = all[j] end
  end
  hdel_all(key, dead)
end
"""


def _lua_str(s: str) -> str:
    return "'" + s.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _lua_list(items: Sequence[Any]) -> str:
    return "{" + ", ".join(_lua_str(x) if isinstance(x, str) else str(x) for x in items) + "}"


def _extreme_kind(op: AggregateOp) -> str:
    t = op.value_types[0]
    return "s" if t == "string" else "i" if t in ("int", "time") else "n"


@dataclass
class _Script:
    """Accumulates the generated lines and the hoisted constants of one script."""

    consts: dict[str, str] = field(default_factory=dict)

    def const(self, text: str) -> str:
        """Return the name of a local holding ``text`` (a Lua expression), declared once."""
        name = self.consts.get(text)
        if name is None:
            n = len(self.consts)
            # Lua allows 200 locals per function: past MAX_LOCAL_CONSTS, a table entry
            name = self.consts[text] = f"c{n}" if n < MAX_LOCAL_CONSTS else f"K[{n}]"
        return name


class LuaGenerator:
    """Generates the per-round scripts and the Python side of their calling convention.

    One method per algebra class for each of: the read code, the write code,
    the write's ARGV values and the decoding of a read's result (like
    sqlglot's per-expression generator methods). Stateless.
    """

    # ------------------------------------------------------------ script text
    def script(self, spec: RoundSpec) -> str:
        """Return the Lua source of one round (module docstring for KEYS/ARGV/reply).

        Args:
            spec: the round's slots.

        Raises:
            NotImplementedError: a slot whose function has no Lua target.
        """
        s = _Script()
        body: list[str] = []
        slot = 2  # KEYS index of the last fixed key
        for r in spec.reads_before:
            slot += 1
            body += self._read(s, r, slot)
        if spec.writes:
            body.append("if not skip then")
            for w in spec.writes:
                slot += 1
                body += ["  " + line for line in self._write(s, w, slot)]
            body.append("end")
        for r in spec.reads_after:
            slot += 1
            body += self._read(s, r, slot)
        head = [
            f"-- generated by compiler.algebra.lua for {spec.name}: do not edit (see that module)",
            common_script(),
            _PRELUDE,
            "local t = tonumber(ARGV[1])",
            "local ts = ARGV[1]",
            "local a = 4",
            "local out = { 1 }",
            "local o = 1",
            "local skip = false",
            "if ARGV[2] ~= '' and KEYS[1] ~= '' then",
            "  if not redis.call('SET', KEYS[1], '1', 'NX', 'PX', ARGV[2]) then skip = true; out[1] = 0 end",
            "end",
            "if ARGV[3] ~= '' and KEYS[2] ~= '' and not skip then redis.call('XADD', KEYS[2], '*', 'event', ARGV[3]) end",
        ]
        consts = ["local K = {}"] + [
            f"{'' if name.startswith('K[') else 'local '}{name} = {text}" for text, name in s.consts.items()
        ]
        return "\n".join(head + consts + body + ["return out", ""])

    def _read(self, s: _Script, r: ReadSlot, k: int) -> list[str]:
        key = f"KEYS[{k}]"
        w_ms, r_ms = r.window_s * 1000, r.resolution_s * 1000
        lines = [f"if {key} ~= '' then"]
        if r.has_after:
            lines += ["  local after = ARGV[a]", "  a = a + 1",
                      f"  local lo, hi = range(t, {w_ms}, {r_ms}, after)"]
        else:
            lines += [f"  local lo, hi = range(t, {w_ms}, {r_ms})"]
        lines += ["  o = o + 1"]
        expr = self._read_expr(s, r, key)
        lines += ["  " + x for x in expr]
        lines += ["end"]
        return lines

    def _cover(self, s: _Script, r: ReadSlot, key: str) -> str:
        """Return a Lua expression reading the read's tile cover (``HMGET``).

        Reads without ``after`` that share a window and components share
        one cover per script call (computed on first use, kept in ``CV``).
        """
        sizes = levels_s(r.window_s)
        sz = s.const(_lua_list([x * 1000 for x in sizes]))
        codes = s.const(_lua_list([LEVEL_CODE[x] for x in sizes]))
        comps = s.const(_lua_list(list(r.op.components)))
        call = f"cover(lo, hi, {r.resolution_s * 1000}, {sz}, {codes}, {comps})"
        if r.has_after:
            return f"hmget({key}, {call})"
        slot = s.const(f"'{r.window_s}:{','.join(r.op.components)}'")
        return f"hmget({key}, CV[{slot}] or cached({slot}, {call}))"

    def _read_expr(self, s: _Script, r: ReadSlot, key: str) -> list[str]:
        op = r.op
        r_ms = r.resolution_s * 1000
        if r.limit is not None:
            return [f"out[o] = redis.call('ZREVRANGEBYSCORE', {key}, ts, lo * {r_ms}, "
                    f"'WITHSCORES', 'LIMIT', 0, {int(r.limit)})"]
        if isinstance(op, DecayedOp):
            return [f"out[o] = redis.call('HMGET', {key}, 'dt', 'dv', 'dw')"]
        if isinstance(op, CountUniqueOp):
            return [f"if lo <= hi then out[o] = count_seen({key}, lo * {r_ms}, t) else out[o] = 0 end"]
        if isinstance(op, LatestOp):
            return [f"out[o] = redis.call('HMGET', {key}, 'lt', 'lv')"]
        cov = self._cover(s, r, key)
        if isinstance(op, CountOp) or (isinstance(op, SumOp) and op.is_int):
            return [f"out[o] = sum_int({cov})"]
        if isinstance(op, SumOp):
            return [f"out[o] = sum_float({cov})"]
        if isinstance(op, AverageOp):
            return [f"out[o] = average({cov})"]
        if isinstance(op, (MinOp, MaxOp)):
            return [f"out[o] = extreme({cov}, '{_extreme_kind(op)}', {'true' if isinstance(op, MinOp) else 'false'})"]
        if isinstance(op, FirstOp):
            return [f"out[o] = first_of({cov})"]
        if isinstance(op, HyperLogLogOp):
            return [f"out[o] = present({cov})"]
        raise NotImplementedError(f"no Lua read for {type(op).__name__}")

    def _tile_fields(self, s: _Script, w: WriteSlot) -> list[str]:
        """Lua names of the write's tile field prefixes (one per level), hoisted per level."""
        out = []
        for size in levels_s(w.window_s):
            out.append(s.const(f"'{LEVEL_CODE[size]}' .. string.format('%d', math.floor(t / {size * 1000}))"))
        return out

    def _write(self, s: _Script, w: WriteSlot, k: int) -> list[str]:
        op = w.op
        key = f"KEYS[{k}]"
        window_ms, res_ms = w.window_s * 1000, w.resolution_s * 1000
        n = self.write_arity(w)
        lines = [f"if {key} ~= '' then"]
        lines += [f"  local v{j} = ARGV[a + {j - 1}]" for j in range(1, n + 1)]
        if n:
            lines.append(f"  a = a + {n}")
        body: list[str] = []
        if w.limit is not None:
            body.append(f"log_write({key}, ts, v1, {int(w.limit)}, {window_ms + res_ms}, {window_ms + res_ms})")
            return lines + ["  " + x for x in body] + ["end"]
        ttl_ms = DECAY_HORIZON * window_ms if isinstance(op, DecayedOp) else window_ms + res_ms
        if isinstance(op, CountOp):
            body += [f"redis.call('HINCRBY', {key}, {f}, '1')" for f in self._tile_fields(s, w)]
        elif isinstance(op, SumOp) and op.is_int:
            body += [f"redis.call('HINCRBY', {key}, {f}, v1)" for f in self._tile_fields(s, w)]
        elif isinstance(op, SumOp):
            body += [f"add_float({key}, {f}, v1)" for f in self._tile_fields(s, w)]
        elif isinstance(op, AverageOp):
            for f in self._tile_fields(s, w):
                body += [f"add_float({key}, {f} .. '.s', v1)",
                         f"redis.call('HINCRBY', {key}, {f} .. '.c', '1')"]
        elif isinstance(op, (MinOp, MaxOp)):
            kind, want = _extreme_kind(op), "true" if isinstance(op, MinOp) else "false"
            body += [f"set_extreme({key}, {f}, v1, '{kind}', {want})" for f in self._tile_fields(s, w)]
        elif isinstance(op, FirstOp):
            body += [f"set_first({key}, {f}, ts, v1)" for f in self._tile_fields(s, w)]
        elif isinstance(op, HyperLogLogOp):
            body += [f"hll_max({key}, {f}, v1, v2)" for f in self._tile_fields(s, w)]
        elif isinstance(op, CountUniqueOp):
            body.append(f"seen({key}, v1, ts)")
        elif isinstance(op, LatestOp):
            body.append(f"latest({key}, ts, v1)")
        elif isinstance(op, DecayedOp):
            body.append(f"decay_merge({key}, ts, tonumber(v1), 1, {op.window_ms})")
        else:
            raise NotImplementedError(f"no Lua write for {type(op).__name__}")
        # prune fields no read at time >= t can use (T(s) <= T(t - W) - 1, SPEC §5.3) at most
        # every W/4; Latest and Decayed* keep fixed fields: nothing to prune
        every, cutoff = max(window_ms // 4, res_ms), f"t - {window_ms + res_ms}"
        if isinstance(op, CountUniqueOp):
            body.append(f"if prune_due({key}, t, {every}) then prune_seen({key}, {cutoff}) end")
        elif op.tiled:
            body.append(f"if prune_due({key}, t, {every}) then prune_tiles({key}, {cutoff}) end")
        body.append(f"redis.call('PEXPIRE', {key}, '{ttl_ms}')")  # a string: Lua numbers print as %.17g
        return lines + ["  " + x for x in body] + ["end"]

    # ------------------------------------------------------- Python side
    def write_arity(self, w: WriteSlot) -> int:
        """Return how many ARGV elements a (non-skipped) write of ``w`` takes."""
        if w.limit is not None:
            return 1
        if isinstance(w.op, CountOp):
            return 0
        if isinstance(w.op, HyperLogLogOp):
            return 2
        return 1

    def write_values(self, w: WriteSlot, values: Sequence[Any]) -> list:
        """Return the ARGV elements of one write of non-null ``values`` (in slot order).

        Args:
            w: the write slot.
            values: the write's values (run-time representation), all non-null.

        Returns:
            ``write_arity(w)`` strings/ints, as the generated code reads them.
        """
        op = w.op
        if w.limit is not None:
            return [values_json(values)]
        if isinstance(op, CountOp):
            return []
        if isinstance(op, SumOp):
            return [str(int(values[0])) if op.is_int else repr(float(values[0]))]
        if isinstance(op, AverageOp):
            return [repr(float(values[0]))]
        if isinstance(op, (MinOp, MaxOp)):
            return [_encode_scalar(values[0], op.value_types[0])]
        if isinstance(op, (FirstOp, LatestOp)):
            return [op.encode_values(values)]
        if isinstance(op, HyperLogLogOp):
            return list(hll_coupon(encode_value_tuple(values, op.value_types)))
        if isinstance(op, CountUniqueOp):
            return ["u" + encode_value_tuple(values, op.value_types)]
        if isinstance(op, DecayedOp):
            return [_g17(float(values[0]) if op.kind != "count" else 1.0)]
        raise NotImplementedError(f"no Lua write for {type(op).__name__}")

    def finisher(self, r: ReadSlot) -> Callable[[Any, int, int | None], Any]:
        """Return the function turning the script's result for read ``r`` into the feature value.

        Chosen once per read slot (not per event). The function takes
        ``(result, read time ms, after time ms or None)``; tiled reads
        finalize :meth:`decode_read`, write logs fold their members (SPEC
        §3.2's ``limit``), ``Decayed*`` weigh to the read time, ``Latest``
        checks its time against the counted range.
        """
        op = r.op
        if r.limit is not None:
            vtypes = op.value_types

            def log(res: Any, t_ms: int, after_ms: int | None) -> Any:
                writes = [(int(float(res[j + 1])), parse_log_member(res[j], vtypes))
                          for j in range(len(res) - 2, -1, -2)]
                return fold(op, writes)

            return log
        if isinstance(op, DecayedOp):
            return lambda res, t_ms, after_ms: op.value_at(op.decode(res), t_ms)
        if isinstance(op, CountUniqueOp):
            return lambda res, t_ms, after_ms: int(res)
        if isinstance(op, LatestOp):
            res_ms = r.resolution_s * 1000

            def latest(res: Any, t_ms: int, after_ms: int | None) -> Any:
                ir = op.decode(res)
                if ir is not None:
                    lo, _ = counted_range(t_ms, r.window_s, after_ms)
                    if not (lo * res_ms <= ir[0] <= t_ms):
                        ir = None
                return op.finalize(ir)

            return latest
        return lambda res, t_ms, after_ms: op.finalize(self.decode_read(r, res))

    def decode_read(self, r: ReadSlot, res: Any) -> Any:
        """Return the IR (``ops`` partial aggregate) of a merged tiled read's result.

        Only for tiled reads without ``limit`` (``Count``, ``Sum``,
        ``Average``, ``Min``, ``Max``, ``First``, ``HyperLogLog``); the others
        return what ``event.lua`` returned and keep their own decoding.

        Args:
            r: the read slot.
            res: the script's result for it (int, bytes, list or None).
        """
        op = r.op
        if isinstance(op, CountOp) or (isinstance(op, SumOp) and op.is_int):
            if isinstance(res, list):  # beyond 2**53: exact int64 sum here
                return sum(_num(x, "int") for x in res)
            return int(res)
        if isinstance(op, SumOp):
            return float(res)
        if isinstance(op, AverageOp):
            return (float(res[0]), int(res[1]))
        if isinstance(op, (MinOp, MaxOp, FirstOp)):
            return op.decode([res])
        if isinstance(op, HyperLogLogOp):  # register-wise max of the tiles' ";slot:rho" texts
            regs: dict[int, int] = {}
            for raw in res:
                for part in raw.split(b";" if isinstance(raw, bytes) else ";")[1:]:
                    slot, _, rho = part.partition(b":" if isinstance(part, bytes) else ":")
                    s, r = int(slot), int(rho)
                    if regs.get(s, 0) < r:
                        regs[s] = r
            return regs
        raise NotImplementedError(f"no merged Lua read for {type(op).__name__}")
