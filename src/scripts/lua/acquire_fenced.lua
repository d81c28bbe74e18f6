local term = fence_term(ARGV[4])
if not term then return -6 end
local seed = redis.call('HMGET', KEYS[3], 'run', 'epoch')
if seed[1] ~= term then return -6 end
if redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then
  if KEYS[4] then
    local legacy = tonumber(redis.call('GET', KEYS[4]) or '')
    if legacy then
      if legacy > (tonumber(redis.call('GET', KEYS[2]) or '0') or 0) then
        redis.call('SET', KEYS[2], legacy)
      end
      redis.call('DEL', KEYS[4])
    end
  end
  return {-1, redis.call('INCR', KEYS[2]), tonumber(seed[2]) or 0}
end
if ARGV[3] == '1' then mark_waited() end
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -1 then return -3 end
return ttl
