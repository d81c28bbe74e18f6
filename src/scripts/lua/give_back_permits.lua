local counted = ARGV[4] == '1' and #KEYS >= 2
local last = #KEYS
if counted then last = #KEYS - 1 end
local given = delete_ours(1, last)
if counted then forget_permit_count(#KEYS, 1, last) end
if given > 0 then redis.pcall('PUBLISH', ARGV[2], ARGV[3]) end
return -1
