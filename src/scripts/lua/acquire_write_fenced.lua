local epoch = seeded_epoch(3, ARGV[3])
if not epoch then return -6 end
local readers = readers_live(KEYS[2], server_ms())
if readers then return readers end
local taken = take_fenced(3, epoch, ARGV[1], true)
if taken then return taken end
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -1 then return -3 end
return ttl
