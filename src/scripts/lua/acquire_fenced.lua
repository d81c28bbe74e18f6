local epoch = seeded_epoch(2, ARGV[3])
if not epoch then return -6 end
local taken = take_fenced(2, epoch, ARGV[1], true)
if taken then return taken end
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -1 then return -3 end
return ttl
