local term = fence_term(ARGV[1])
if not term then return -6 end
if term ~= ARGV[2] then return -6 end
redis.call('HSET', KEYS[1], 'run', term)
return -1
