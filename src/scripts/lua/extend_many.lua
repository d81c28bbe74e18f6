for _, key in ipairs(KEYS) do
  local value = redis.call('GET', key)
  if value ~= ARGV[1] then
    if not value then return -2 end
    local ttl = redis.call('PTTL', key)
    if ttl == -1 then return -3 end
    return ttl
  end
end
for _, key in ipairs(KEYS) do redis.call('PEXPIRE', key, ARGV[2]) end
return -1
