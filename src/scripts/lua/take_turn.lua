-- This waiter's turn (ARGV[3] its id): when the lock (KEYS[1]) is free, reserved for it or
-- handed to it (with a token of an earlier request of its, `handed.lua`), leaves the queue
-- (KEYS[2], KEYS[3]) and answers the token (ARGV[1]) to write, marked as waited for (a lock
-- that came through the queue was contended); nil otherwise.
local function take_turn()
  local value = redis.call('GET', KEYS[1])
  if value and value ~= 'handoff:' .. ARGV[3] and not handed_to(value, ARGV[3]) then
    return nil
  end
  redis.pcall('ZREM', KEYS[2], ARGV[3])
  redis.pcall('HDEL', KEYS[3], ARGV[3], ARGV[3] .. ':h')
  local token = ARGV[1]
  if string.sub(token, 1, 2) == 'n-' then token = 'w-' .. string.sub(token, 3) end
  return token
end
