local now = server_ms()
local ttl = tonumber(ARGV[2])
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
local live = score and tonumber(score) > now
local writer = redis.call('PTTL', KEYS[1])
if live or (ARGV[3] == '1' and writer == -2) then
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
  if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
  if live then return -1 end
  return -5
end
if score then redis.call('ZREM', KEYS[2], ARGV[1]) end
if writer == -2 then return -2 end
if writer == -1 then return -3 end
return writer
