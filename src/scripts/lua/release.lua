local value = redis.call('GET', KEYS[1])
if value ~= ARGV[1] then return not_ours(value) end
hand_over()
return -1
