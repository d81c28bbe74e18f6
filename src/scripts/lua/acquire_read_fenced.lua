local epoch = seeded_epoch(5, ARGV[3])
if not epoch then return -6 end
local now = server_ms()
local value = redis.call('GET', KEYS[1])
if value and value ~= 'readers' then
  mark_waited()
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl == -1 then return -3 end
  return ttl
end
local waits = writer_waits(KEYS[3], KEYS[4], now)
if waits then return waits end
readers_live(KEYS[2], now)
local ttl = tonumber(ARGV[2])
redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
hold_for_readers(ttl)
-- The counter as it stands (a read raises nothing), or the resource's own older counter
-- where that is larger (a write folds it in).
local counter = tonumber(redis.call('GET', KEYS[5]) or '0') or 0
if KEYS[7] then
  local legacy = tonumber(redis.call('GET', KEYS[7]) or '')
  if legacy and legacy > counter then counter = legacy end
end
return {-1, counter, epoch}
