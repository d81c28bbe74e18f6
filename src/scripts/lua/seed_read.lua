local term = fence_term(ARGV[1])
if not term then return -6 end
local run = redis.call('HGET', KEYS[2], 'run')
redis.call('HINCRBY', KEYS[2], 'epoch', 1)
local legacy = false
if KEYS[3] then legacy = redis.call('GET', KEYS[3]) end
return {redis.call('GET', KEYS[1]), run, legacy, term}
