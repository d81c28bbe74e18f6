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
