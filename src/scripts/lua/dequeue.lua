if KEYS[2] then
  redis.pcall('ZREM', KEYS[2], ARGV[1])
  redis.pcall('HDEL', KEYS[3], ARGV[1], ARGV[1] .. ':h')
end
local value = redis.call('GET', KEYS[1])
-- A reservation, or a lock handed to this waiter that it does not hold (ARGV[5], the token
-- it holds by the hand-off, if any), is passed on as the release would have.
local held = 'h-' .. (ARGV[5] or '') .. '|' .. ARGV[1]
if value == 'handoff:' .. ARGV[1] or (handed_to(value, ARGV[1]) and value ~= held) then
  hand_over(ARGV[2], ARGV[3], ARGV[4], nil, nil, nil, nil, true)
end
return -1
