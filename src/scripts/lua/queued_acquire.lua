local value = redis.call('GET', KEYS[1])
if not value or value == 'handoff:' .. ARGV[3] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  redis.pcall('ZREM', KEYS[2], ARGV[3])
  redis.pcall('HDEL', KEYS[3], ARGV[3])
  return -1
end
join_queue(ARGV[3], ARGV[4], ARGV[5])
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -1 then return -3 end
return ttl
