local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) <= server_ms() then return -2 end
local term = fence_term(ARGV[4])
if not term then return -6 end
if redis.call('HGET', KEYS[3], 'run') ~= term then return -7 end
if ARGV[3] ~= '' and (tonumber(redis.call('HGET', KEYS[3], 'epoch')) or 0) ~= tonumber(ARGV[3]) then
  return -7
end
local fence = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
if fence < tonumber(ARGV[2]) then redis.call('SET', KEYS[2], ARGV[2]) end
return -1
