local record = redis.call('GET', KEYS[2])
local value = redis.call('GET', KEYS[1])
if value == ARGV[1] or (not value and ARGV[4] == '1') then
  if record and record ~= ARGV[3] then return {-8, tonumber(record) or -1, 0} end
  local answer = -1
  if value then
    redis.call('PEXPIRE', KEYS[1], ARGV[2])
  else
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    answer = -5
  end
  if redis.call('PTTL', KEYS[2]) < tonumber(ARGV[2]) then
    redis.call('SET', KEYS[2], ARGV[3], 'PX', ARGV[2])
  end
  return answer
end
if not value then return -2 end
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -1 then return -3 end
return ttl
