-- A read-write lock's readers on this master (`readers`, a sorted set of reader tokens scored
-- by the server's millisecond each share expires at): drops the shares that expired (`now`,
-- the server's time in ms) and answers how long the last one left lasts, or nil when none
-- does. Each share expires by its own score, so a crashed reader frees its share alone.
local function readers_live(readers, now)
  redis.call('ZREMRANGEBYSCORE', readers, '-inf', now)
  local last = redis.call('ZRANGE', readers, -1, -1, 'WITHSCORES')
  if not last[1] then return nil end
  return math.max(tonumber(last[2]) - now, 0)
end
-- The server's time in ms.
local function server_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
-- Keeps the lock key (KEYS[1]) held for the readers, `readers` as its value, for at least
-- `ms` more (and 1 ms, since a script's expiries count from its start and the shares' scores
-- from its `TIME`): while any share is live the lock key exists, so a write (any acquire of
-- the lock, the server's own `SET NX` included) is refused there. Never shortened here.
local function hold_for_readers(ms)
  if redis.call('PTTL', KEYS[1]) < ms + 1 then
    redis.call('SET', KEYS[1], 'readers', 'PX', ms + 1)
  end
end
