-- event.lua: all reads and writes of one event (one stage) in one round trip.
-- Source: SPEC §5.2 (one round trip, atomic per (aggregate, key)),
-- §5.3 (expiry and pruning); layout in compiler/algebra/ops.py.
--
-- KEYS: the Redis hashes touched (sc:{<entity key>}:<definition hash>) and,
--       for an idempotent event, its id key.
-- ARGV: a flat list of operations, each an opcode followed by its arguments
--       (k = 1-based index into KEYS):
--   ID   k ttl_ms          SET NX PX; if the id was seen, skip every write op
--                          below (reads still run). Pushes 1 (new) or 0 (seen).
--   I    k field n         field := field + n, exact at any size
--                          (common.lua int_add_text)       (write)
--   MIN  k field v kind    keep the smaller of v and field (kind n: float,
--   MAX  k field v kind    i: int64 text, exact; s: string by byte = code
--                          point order)                           (write)
--   SEEN k member ms       CountUnique (a sorted set): member's score :=
--                          max(score, ms)                 (write)
--   LA   k ms json         lt/lv := ms/json if ms >= lt   (write)
--   FI   k field ms json   field := "ms<TAB>json" if ms < the field's ms
--                          (First: the tile's earliest write)    (write)
--   MF   k n (mode field value extra) x n
--                          n field merges in one HMGET and one HSET (per
--                          MF_CHUNK fields): mode I (int add, exact at any
--                          size: int_add_text), F (double add, stored
--                          %.17g as the generated scripts do), MIN/MAX
--                          (extra: kind), FI (value: ms, extra: json), HMS
--                          (value: registers text; extra unused)  (write)
--   HM   k field slot rho  HyperLogLog register slot of the sparse text
--                          ";slot:rho;..." := max(rho, current)  (write)
--   DE   k ms v w_ms       decayed sums dt/dv/dw (ops.DecayedOp.update):
--                          rescale to ms if ms >= dt, else add v*exp(-(dt-ms)/w)
--   ZW   k ms json n cutoff_ms ttl_ms
--                          write log (sorted set): add member
--                          "<8-digit rank at ms><ms>:<json>" scored ms, drop
--                          members scored < cutoff, keep the n highest
--                          before ms - LATE_MS and every later one,
--                          PEXPIRE ttl                            (write)
--   ZT   k n               write log: keep the n highest members before the
--                          highest score - LATE_MS and every later one (write)
--   X    k ttl_ms ms w_ms r_ms prune_every_ms
--                          prune fields no read at time >= ms can use, when
--                          due; drop _m (the latest written tile of the
--                          generated scripts: they recompute it); then
--                          PEXPIRE k ttl_ms                (write)
--   SX   k ttl_ms ms w_ms r_ms
--                          CountUnique: drop the members scored at or before
--                          ms - w - r (no read at time >= ms counts them),
--                          then PEXPIRE k ttl_ms           (write)
--   R    k n f1..fn        push HMGET f1..fn              (read)
--   T    k lo hi r ns s1..sns nc c1..cnc
--                          push HMGET of the tiles covering resolution tiles
--                          lo..hi exactly (r: resolution, s*: tile sizes in
--                          seconds finest first, c*: component suffixes);
--                          the cover is windows.cover() of windows.py, one
--                          field per (tile, component), tiles in time order (read)
--   U    k lo_ms hi_ms     push the number of members scored in [lo, hi] (read)
--   ZR   k lo_ms hi_ms n   push ZREVRANGEBYSCORE hi lo LIMIT 0 n WITHSCORES:
--                          the n latest log members in [lo, hi]   (read)
-- Merge ops of stream micro-batches (writer/stream.py, SPEC §5.7); each
-- merges a partial aggregate of many writes (ops.AggregateOp.merge):
--   B    k field batch ttl_ms
--                          exactly-once guard: if the hash field holds a
--                          batch id >= batch, skip every write op below;
--                          else set it to batch and PEXPIRE ttl. Pushes 1
--                          (applied) or 0 (already applied).
--   DM   k ms v w w_ms     merge decayed partial sums (v, w) weighed at ms
--                          into dt/dv/dw (ops.DecayedOp.merge)     (write)
--   HMS  k field text      HyperLogLog: merge the registers ";slot:rho;.."
--                          of text into the field's (register-wise max) (write)
--   ZM   k cnt n cutoff_ms ttl_ms (ms rank json) x cnt
--                          write log: cnt members, oldest first, added as ZW
--                          adds one, each member's rank being the rank the
--                          key's log had at its ms before this call (top
--                          rank + 1, else 0) plus rank; then one trim as
--                          ZW's, as of the last (latest) member: what
--                          trimming after each member leaves, since every
--                          member a trim drops the last trim drops too
--                          (cutoff_ms: the last member's)       (write)
--   XA   k json            XADD k * event json: append the event to a
--                          Redis stream (serving's SCOWL_EVENT_STREAM) (write)
-- Returns the pushed values, in order.

-- the allowed lateness (ms) write logs keep every member of (common.lua log_add;
-- windows.ALLOWED_LATENESS_S, the serving default: SPEC §3.3)
local LATE_MS = 3600000
-- fields per HMGET/HSET of the MF op
local MF_CHUNK = 200

-- HyperLogLog registers: the register-wise max of two sparse texts ";slot:rho;..."
-- (cur's slots first, in its order, then text's new ones)
local function registers_text(cur, text)
  local regs, order = {}, {}
  max_registers(regs, order, cur or '')
  max_registers(regs, order, text)
  local parts = {}
  for j, s in ipairs(order) do parts[j] = ';' .. s .. ':' .. string.format('%d', regs[s]) end
  return table.concat(parts)
end


-- tile size codes by seconds, as windows.LEVEL_CODE (sizes by code: common.lua SIZE_OF)
local CODES = { [1] = 's', [5] = 'a', [15] = 'b', [60] = 'm', [300] = 'c', [900] = 'e',
                [3600] = 'h', [14400] = 'f', [86400] = 'd' }

-- (the update functions -- less, set_extreme, seen, latest, set_first, hll_max,
-- decay_merge, max_registers, next_rank, log_add, count_seen -- come from
-- common.lua, prepended by compiler.algebra.script)

local out = {}
local skip = false
local i = 1
local n = #ARGV
while i <= n do
  local op = ARGV[i]
  local key = KEYS[tonumber(ARGV[i + 1])]
  if op == 'R' then
    local cnt = tonumber(ARGV[i + 2])
    if cnt == 0 then
      out[#out + 1] = {}
    else
      out[#out + 1] = redis.call('HMGET', key, unpack(ARGV, i + 3, i + 2 + cnt))
    end
    i = i + 3 + cnt
  elseif op == 'T' then
    local lo, hi, r = tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4])
    local ns = tonumber(ARGV[i + 5])
    local sizes = {}
    for j = 1, ns do sizes[j] = tonumber(ARGV[i + 5 + j]) end
    local nc = tonumber(ARGV[i + 6 + ns])
    local comps = {}
    for j = 1, nc do comps[j] = ARGV[i + 6 + ns + j] end
    local sizes_ms, codes = {}, {}
    for j = 1, ns do
      sizes_ms[j] = sizes[j] * 1000
      codes[j] = CODES[sizes[j]]
    end
    out[#out + 1] = hmget(key, cover(lo, hi, r * 1000, sizes_ms, codes, comps))
    i = i + 7 + ns + nc
  elseif op == 'I' then
    if not skip then
      local f = ARGV[i + 2]
      redis.call('HSET', key, f, int_add_text(redis.call('HGET', key, f), ARGV[i + 3]))
    end
    i = i + 4
  elseif op == 'MIN' or op == 'MAX' then
    if not skip then set_extreme(key, ARGV[i + 2], ARGV[i + 3], ARGV[i + 4], op == 'MIN') end
    i = i + 5
  elseif op == 'SEEN' then
    if not skip then seen(key, ARGV[i + 2], ARGV[i + 3]) end
    i = i + 4
  elseif op == 'LA' then
    if not skip then latest(key, ARGV[i + 2], ARGV[i + 3]) end
    i = i + 4
  elseif op == 'FI' then
    if not skip then set_first(key, ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]) end
    i = i + 5
  elseif op == 'HM' then
    if not skip then hll_max(key, ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]) end
    i = i + 5
  elseif op == 'DE' then
    if not skip then decay_merge(key, ARGV[i + 2], tonumber(ARGV[i + 3]), 1, tonumber(ARGV[i + 4])) end
    i = i + 5
  elseif op == 'ZW' then
    if not skip then
      local ms = ARGV[i + 2]
      log_add(key, ms, next_rank(key, ms), ARGV[i + 3], ARGV[i + 4], ARGV[i + 5], ARGV[i + 6], LATE_MS)
    end
    i = i + 7
  elseif op == 'ZT' then
    if not skip then
      local top = redis.call('ZREVRANGE', key, 0, 0, 'WITHSCORES')
      if top[2] then
        local below = redis.call('ZCOUNT', key, '-inf', '(' .. string.format('%d', tonumber(top[2]) - LATE_MS))
        local n = tonumber(ARGV[i + 2])
        if below > n then redis.call('ZREMRANGEBYRANK', key, 0, below - n - 1) end
      end
    end
    i = i + 3
  elseif op == 'ZR' then
    out[#out + 1] = redis.call('ZREVRANGEBYSCORE', key, ARGV[i + 3], ARGV[i + 2], 'WITHSCORES', 'LIMIT', 0, ARGV[i + 4])
    i = i + 5
  elseif op == 'X' then
    if not skip then
      local ms = tonumber(ARGV[i + 3])
      local due = redis.call('HGET', key, '_p')
      if not due or ms >= tonumber(due) then
        local cutoff = ms - tonumber(ARGV[i + 4]) - tonumber(ARGV[i + 5])
        -- the expired tiles (common.lua dead_tiles; serving's raw tiles are its own passes')
        -- and '_m' (the generated serving scripts' latest written tile: unknown after these writes)
        local gone = dead_tiles(redis.call('HKEYS', key), 1, cutoff, -9007199254740992)
        gone[#gone + 1] = '_m'
        hdel_all(key, gone)
        redis.call('HSET', key, '_p', tostring(ms + tonumber(ARGV[i + 6])))
      else
        -- the generated serving scripts' latest written tile: unknown after these writes
        redis.call('HDEL', key, '_m')
      end
      redis.call('PEXPIRE', key, ARGV[i + 2])
    end
    i = i + 7
  elseif op == 'SX' then
    if not skip then
      local cutoff = tonumber(ARGV[i + 3]) - tonumber(ARGV[i + 4]) - tonumber(ARGV[i + 5])
      redis.call('ZREMRANGEBYSCORE', key, '-inf', string.format('%d', cutoff))
      redis.call('PEXPIRE', key, ARGV[i + 2])
    end
    i = i + 6
  elseif op == 'U' then
    out[#out + 1] = count_seen(key, tonumber(ARGV[i + 2]), tonumber(ARGV[i + 3]))
    i = i + 4
  elseif op == 'B' then
    local cur = redis.call('HGET', key, ARGV[i + 2])
    if cur and tonumber(cur) >= tonumber(ARGV[i + 3]) then
      skip = true
      out[#out + 1] = 0
    else
      redis.call('HSET', key, ARGV[i + 2], ARGV[i + 3])
      redis.call('PEXPIRE', key, ARGV[i + 4])
      out[#out + 1] = 1
    end
    i = i + 5
  elseif op == 'DM' then
    if not skip then
      decay_merge(key, ARGV[i + 2], tonumber(ARGV[i + 3]), tonumber(ARGV[i + 4]), tonumber(ARGV[i + 5]))
    end
    i = i + 6
  elseif op == 'HMS' then
    if not skip then
      local f = ARGV[i + 2]
      redis.call('HSET', key, f, registers_text(redis.call('HGET', key, f), ARGV[i + 3]))
    end
    i = i + 4
  elseif op == 'MF' then
    -- a key's field merges, one HMGET and one HSET per MF_CHUNK fields
    local n = tonumber(ARGV[i + 2])
    if not skip then
      local base, j = i + 3, 0
      while j < n do
        local m = math.min(MF_CHUNK, n - j)
        local fields = {}
        for q = 1, m do fields[q] = ARGV[base + 4 * (j + q - 1) + 1] end
        local curs = redis.call('HMGET', key, unpack(fields))
        local kv = {}
        for q = 1, m do
          local b = base + 4 * (j + q - 1)
          local mode, f, v, x = ARGV[b], ARGV[b + 1], ARGV[b + 2], ARGV[b + 3]
          local cur = curs[q] or nil
          local new
          if not cur and (mode == 'I' or mode == 'HMS') then
            -- a new tile: the partial's text as sent (canonical: an int's decimal digits, the
            -- registers ";slot:rho" of distinct slots), what the merge below would write
            new = v
          elseif mode == 'I' then
            new = int_add_text(cur, v)
          elseif mode == 'F' then
            new = float_text(cur, v)
          elseif mode == 'MIN' or mode == 'MAX' then
            new = extreme_text(cur, v, x, mode == 'MIN')
          elseif mode == 'FI' then
            new = first_text(cur, v, x)
          elseif mode == 'HMS' then
            new = registers_text(cur, v)
          else
            return redis.error_reply('event.lua MF: unknown mode ' .. tostring(mode))
          end
          if new then
            kv[#kv + 1] = f
            kv[#kv + 1] = new
          end
        end
        if #kv > 0 then redis.call('HSET', key, unpack(kv)) end
        j = j + m
      end
    end
    i = i + 3 + 4 * n
  elseif op == 'ZM' then
    local cnt = tonumber(ARGV[i + 2])
    if not skip then
      -- every member's rank from the log as it was before this op: ranks at each ms first, then the adds
      local base, add = {}, {}
      local ms
      for q = 0, cnt - 1 do
        local b = i + 6 + 3 * q
        ms = ARGV[b]
        local r0 = base[ms]
        if r0 == nil then
          r0 = next_rank(key, ms)
          base[ms] = r0
        end
        add[#add + 1] = ms
        add[#add + 1] = string.format('%08d', r0 + tonumber(ARGV[b + 1])) .. ms .. ':' .. ARGV[b + 2]
        if #add >= 2 * MF_CHUNK then
          redis.call('ZADD', key, unpack(add))
          add = {}
        end
      end
      if #add > 0 then redis.call('ZADD', key, unpack(add)) end
      if ms then log_trim(key, ms, ARGV[i + 3], ARGV[i + 4], ARGV[i + 5], LATE_MS) end
    end
    i = i + 6 + 3 * cnt
  elseif op == 'XA' then
    if not skip then redis.call('XADD', key, '*', 'event', ARGV[i + 2]) end
    i = i + 3
  elseif op == 'ID' then
    local ok = redis.call('SET', key, '1', 'NX', 'PX', ARGV[i + 2])
    if ok then
      out[#out + 1] = 1
    else
      skip = true
      out[#out + 1] = 0
    end
    i = i + 3
  else
    return redis.error_reply('scowl event.lua: unknown op ' .. tostring(op))
  end
end
return out
