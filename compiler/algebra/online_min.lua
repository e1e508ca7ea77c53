-- Lower online-writer start times (compiler/algebra/storekeys.py, ONLINE_KEY).
-- KEYS[1]: the hash (sc:online). ARGV: field, ms, field, ms, ... (field: a
-- definition hash; ms: an event time in epoch ms, decimal text).
-- Each field becomes min(current, ms), so re-applying a write changes
-- nothing. Epoch ms (< 2^53) compare exactly as Lua numbers.
-- Registered by serving/store.py and run by writer/stream.py.
for i = 1, #ARGV, 2 do
  local cur = redis.call('HGET', KEYS[1], ARGV[i])
  if not cur or tonumber(ARGV[i + 1]) < tonumber(cur) then
    redis.call('HSET', KEYS[1], ARGV[i], ARGV[i + 1])
  end
end
return 1
