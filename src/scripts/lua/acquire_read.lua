local now = server_ms()
local value = redis.call('GET', KEYS[1])
if value and value ~= 'readers' then
  -- Marked as waited for: the writer's release then runs the script, which publishes, and
  -- not the server's own compare-and-delete, which would wake no reader.
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
return -1
