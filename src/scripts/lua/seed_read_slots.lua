local term = fence_term(ARGV[1])
if not term then return -6 end
local answer = {term}
for i = 1, #KEYS, 2 do
  answer[#answer + 1] = redis.call('GET', KEYS[i])
  answer[#answer + 1] = redis.call('HGET', KEYS[i + 1], 'run')
  redis.call('HINCRBY', KEYS[i + 1], 'epoch', 1)
end
return answer
