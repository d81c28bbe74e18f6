local value = redis.call('GET', KEYS[1])
if not ours(value) then return not_ours(value) end
hand_over(ARGV[2], ARGV[3], ARGV[4])
return -1
