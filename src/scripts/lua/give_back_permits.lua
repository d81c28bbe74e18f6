local given = 0
for _, key in ipairs(KEYS) do
  if redis.call('GET', key) == ARGV[1] then
    redis.call('DEL', key)
    given = given + 1
  end
end
if given > 0 then redis.pcall('PUBLISH', ARGV[2], ARGV[3]) end
return -1
