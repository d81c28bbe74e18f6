local value = redis.call('GET', KEYS[1])
if not ours(value) then return not_ours(value) end
local ttl = redis.call('PTTL', KEYS[1])
if ttl > 0 then
  redis.call('SET', KEYS[2], ARGV[2], 'PX', ttl)
elseif ttl == -1 then
  redis.call('SET', KEYS[2], ARGV[2])
else
  return -2
end
return -1
