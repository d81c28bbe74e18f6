local term = fence_term(ARGV[1])
if not term then return -6 end
if term ~= ARGV[2] then return -6 end
for i = 1, #KEYS, 2 do
  local value = ARGV[2 + (i + 1) / 2]
  local fence = tonumber(redis.call('GET', KEYS[i]) or '0') or 0
  if fence < tonumber(value) then redis.call('SET', KEYS[i], value) end
  redis.call('HSET', KEYS[i + 1], 'run', term)
end
return -1
