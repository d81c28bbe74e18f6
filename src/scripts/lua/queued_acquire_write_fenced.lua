local epoch = seeded_epoch(5, ARGV[6])
if not epoch then return -6 end
local readers = readers_live(KEYS[4], server_ms())
local token = nil
if not readers then token = take_turn() end
if token then return take_fenced(5, epoch, token, false) end
join_queue(ARGV[3], ARGV[4], ARGV[5])
if readers then return readers end
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -1 then return -3 end
return ttl
