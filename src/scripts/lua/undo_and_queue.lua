local value = redis.call('GET', KEYS[1])
local answer = -2
if ours(value) then
  redis.call('DEL', KEYS[1])
  answer = -1
elseif value then
  answer = redis.call('PTTL', KEYS[1])
  if answer == -1 then answer = -3 end
  mark_waited()
end
if KEYS[2] then join_queue(ARGV[2], ARGV[3], ARGV[4]) end
if not value and ARGV[5] then hand_over(ARGV[5], ARGV[6], ARGV[7]) end
return answer
