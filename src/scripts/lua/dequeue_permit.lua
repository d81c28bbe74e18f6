local permits = #KEYS - 2
local queue, waiters = KEYS[permits + 1], KEYS[permits + 2]
redis.pcall('ZREM', queue, ARGV[1])
redis.pcall('HDEL', waiters, ARGV[1], ARGV[1] .. ':h')
local mine = 'handoff:' .. ARGV[1]
for i = 1, permits do
  if redis.call('GET', KEYS[i]) == mine then
    hand_over(ARGV[2], ARGV[3], ARGV[4], KEYS[i], queue, waiters)
  end
end
return -1
