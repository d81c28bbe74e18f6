local reader = KEYS[4] and redis.pcall('HGET', KEYS[3], ARGV[1] .. ':h') == 'r'
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
elseif reader and value == 'readers' then
  -- A reader leaving (its readers' set in KEYS[4]): a bare mark, perhaps handed to the run it
  -- headed, is left to the readers still queued first, passed on to a writer first, or
  -- deleted with nobody waiting (`bare_mark.lua`).
  local now = server_ms()
  if not readers_live(KEYS[4], now) then
    pass_on_bare_mark(ARGV[2], ARGV[3], ARGV[4], now, KEYS[1], KEYS[2], KEYS[3])
  end
end
return -1
