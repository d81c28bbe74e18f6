local answer = -1
for i, key in ipairs(KEYS) do
  local value = redis.call('GET', key)
  if value == ARGV[1] then
    redis.call('DEL', key)
    redis.pcall('PUBLISH', ARGV[i + 2], ARGV[2])
  elseif answer == -1 then
    if not value then
      answer = -2
    else
      answer = redis.call('PTTL', key)
      if answer == -1 then answer = -3 end
    end
  end
end
return answer
