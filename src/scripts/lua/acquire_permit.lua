local permits = #KEYS - 1
local record = KEYS[#KEYS]
local other = other_permit_count(record, permits)
if other then return other end
local shortest = -1
for i = 1, permits do
  local key = KEYS[i]
  if redis.call('SET', key, ARGV[1], 'NX', 'PX', ARGV[2]) then
    keep_permit_count(record, permits, ARGV[2])
    return {-1, tonumber(ARGV[i + 2]), 0}
  end
  local ttl = redis.call('PTTL', key)
  if ttl >= 0 and (shortest < 0 or ttl < shortest) then shortest = ttl end
end
if shortest < 0 then return -3 end
return shortest
