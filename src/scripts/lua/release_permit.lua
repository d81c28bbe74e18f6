local value = redis.call('GET', KEYS[1])
if value ~= ARGV[1] then
  local answer = not_ours(value)
  if KEYS[2] then forget_permit_count(2, 3, #KEYS) end
  return answer
end
redis.call('DEL', KEYS[1])
if KEYS[2] then forget_permit_count(2, 3, #KEYS) end
redis.pcall('PUBLISH', ARGV[2], ARGV[3])
return -1
