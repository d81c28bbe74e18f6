local shortest = -1
for i, key in ipairs(KEYS) do
  if redis.call('SET', key, ARGV[1], 'NX', 'PX', ARGV[2]) then
    return {-1, tonumber(ARGV[i + 2]), 0}
  end
  local ttl = redis.call('PTTL', key)
  if ttl >= 0 and (shortest < 0 or ttl < shortest) then shortest = ttl end
end
if shortest < 0 then return -3 end
return shortest
