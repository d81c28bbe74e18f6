local epoch = seeded_epoch(4, ARGV[6])
if not epoch then return -6 end
local value = redis.call('GET', KEYS[1])
if not value or value == 'handoff:' .. ARGV[3] then
  redis.pcall('ZREM', KEYS[2], ARGV[3])
  redis.pcall('HDEL', KEYS[3], ARGV[3])
  local token = ARGV[1]
  if string.sub(token, 1, 2) == 'n-' then token = 'w-' .. string.sub(token, 3) end
  return take_fenced(4, epoch, token, false)
end
join_queue(ARGV[3], ARGV[4], ARGV[5])
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -1 then return -3 end
return ttl
