-- What `DELIFEQ` does, for a server without it: deletes KEYS[1] only while it holds ARGV[1];
-- 1 when it deleted, else 0.
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
