local counted = ARGV[4] == '1' and #KEYS >= 2
local last = #KEYS
if counted then last = #KEYS - 1 end
local given = 0
for i = 1, last do
  if redis.call('GET', KEYS[i]) == ARGV[1] then
    redis.call('DEL', KEYS[i])
    given = given + 1
  end
end
if counted then forget_permit_count(#KEYS, 1, last) end
if given > 0 then redis.pcall('PUBLISH', ARGV[2], ARGV[3]) end
return -1
