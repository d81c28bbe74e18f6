local now = server_ms()
local ttl = tonumber(ARGV[2])
local value = redis.call('GET', KEYS[1])
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
-- A writer's key (or a reservation for one): no share is renewed or re-added beside it.
if value and value ~= 'readers' then
  local left = redis.call('PTTL', KEYS[1])
  if left == -1 then return -3 end
  return left
end
local live = score and tonumber(score) > now
if live or ARGV[3] == '1' then
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
  -- The set and the mark last as long as the longest live share (ours perhaps shortened by
  -- this renewal), no longer.
  local left = readers_live(KEYS[2], now)
  redis.call('PEXPIRE', KEYS[2], left + 1)
  if value then
    redis.call('PEXPIRE', KEYS[1], left + 1)
  else
    redis.call('SET', KEYS[1], 'readers', 'PX', left + 1)
  end
  if live then return -1 end
  return -5
end
if score then redis.call('ZREM', KEYS[2], ARGV[1]) end
return -2
