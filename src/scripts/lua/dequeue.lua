if KEYS[2] then
  redis.pcall('ZREM', KEYS[2], ARGV[1])
  redis.pcall('HDEL', KEYS[3], ARGV[1])
end
if redis.call('GET', KEYS[1]) == 'handoff:' .. ARGV[1] then hand_over(ARGV[2], ARGV[3], ARGV[4]) end
return -1
