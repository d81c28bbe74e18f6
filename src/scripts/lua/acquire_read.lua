local now = server_ms()
local ttl = redis.call('PTTL', KEYS[1])
if ttl ~= -2 then
  -- Marked as waited for: the writer's release then runs the script, which publishes, and
  -- not the server's own compare-and-delete, which would wake no reader.
  mark_waited()
  if ttl == -1 then return -3 end
  return ttl
end
local waits = writer_waits(KEYS[3], KEYS[4], now)
if waits then return waits end
readers_live(KEYS[2], now)
redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[1])
if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[2], ARGV[2])
end
return -1
