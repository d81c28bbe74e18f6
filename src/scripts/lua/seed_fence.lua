local term = fence_term(ARGV[2])
if not term then return -6 end
if term ~= ARGV[3] then return -6 end
local fence = tonumber(redis.call('GET', KEYS[1]) or '0') or 0
if fence < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) end
redis.call('HSET', KEYS[2], 'run', term)
return -1
