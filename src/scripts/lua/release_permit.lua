local value = redis.call('GET', KEYS[1])
local answer = -1
if value == ARGV[1] then
  redis.call('DEL', KEYS[1])
else
  answer = not_ours(value)
end
if KEYS[2] then
  delete_ours(3, #KEYS)
  forget_permit_count(2, 3, #KEYS)
end
if answer == -1 then redis.pcall('PUBLISH', ARGV[2], ARGV[3]) end
return answer
