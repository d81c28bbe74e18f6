local epoch = seeded_epoch(4, ARGV[6])
if not epoch then return -6 end
local token = take_turn()
if token then return take_fenced(4, epoch, token, false) end
join_queue(ARGV[3], ARGV[4], ARGV[5])
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -1 then return -3 end
return ttl
