local value = redis.call('GET', KEYS[1])
if ours(value) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
  return -1
end
if not value then
  if ARGV[3] == '1' and not readers_live(KEYS[2], server_ms()) then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    return -5
  end
  return -2
end
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -1 then return -3 end
return ttl
