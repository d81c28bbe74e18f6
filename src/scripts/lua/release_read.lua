local now = server_ms()
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
local answer = -2
if score then
  redis.call('ZREM', KEYS[2], ARGV[1])
  if tonumber(score) > now then answer = -1 end
end
local left = readers_live(KEYS[2], now)
-- The set and the mark last as long as the longest live share, no longer: a released longer
-- share must not keep writers out, nor its set stay, after the others expire.
if left then redis.call('PEXPIRE', KEYS[2], left + 1) end
if redis.call('GET', KEYS[1]) ~= 'readers' then return answer end
if left then
  redis.call('PEXPIRE', KEYS[1], left + 1)
elseif ARGV[2] ~= '' then
  -- The last share gone: the lock is free here, as after a writer's release. A release hands
  -- it to the first queued writer (or deletes it and publishes).
  hand_over(ARGV[2], ARGV[3], ARGV[4], KEYS[1], KEYS[3], KEYS[4], nil, true)
else
  -- A failed round's silent cleanup only deletes it.
  redis.call('DEL', KEYS[1])
end
return answer
