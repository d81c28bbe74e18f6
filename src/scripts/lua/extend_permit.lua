local value = redis.call('GET', KEYS[1])
if value == ARGV[1] or (not value and ARGV[4] == '1') then
  local other = other_permit_count(KEYS[2], ARGV[3])
  if other then return other end
  local answer = -1
  if value then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  else
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    answer = -5
  end
  keep_permit_count(KEYS[2], ARGV[3], ARGV[2])
  return answer
end
if not value then return -2 end
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -1 then return -3 end
return ttl
