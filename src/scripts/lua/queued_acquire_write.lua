local readers = readers_live(KEYS[4], server_ms())
local token = nil
if not readers then token = take_turn() end
if token then
  redis.call('SET', KEYS[1], token, 'PX', ARGV[2])
  return -1
end
join_queue(ARGV[3], ARGV[4], ARGV[5], ARGV[2], ARGV[6])
if readers then return readers end
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -1 then return -3 end
return ttl
