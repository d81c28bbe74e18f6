local value = redis.call('GET', KEYS[1])
-- Handed to this waiter by a release since its round: its lock now, kept for it, and it does
-- not queue again (its next round takes the key, or its leaving passes it on).
if ARGV[2] ~= '' and handed_to(value, ARGV[2]) then return -2 end
local answer = -2
if ours(value) then
  redis.call('DEL', KEYS[1])
  answer = -1
elseif value then
  answer = redis.call('PTTL', KEYS[1])
  if answer == -1 then answer = -3 end
  mark_waited()
end
if KEYS[2] then join_queue(ARGV[2], ARGV[3], ARGV[4], ARGV[8], ARGV[9]) end
if not value and ARGV[5] then hand_over(ARGV[5], ARGV[6], ARGV[7], nil, nil, nil, nil, true) end
return answer
