local value = redis.call('GET', KEYS[1])
if not ours(value) then return not_ours(value) end
return raise_fence()
