local now = server_ms()
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
local answer = -2
if score then
  redis.call('ZREM', KEYS[2], ARGV[1])
  if tonumber(score) > now then answer = -1 end
end
-- Only the last share's release can let a writer in: the others wake nobody.
if answer == -1 and ARGV[2] ~= '' and not readers_live(KEYS[2], now) then
  redis.pcall('PUBLISH', ARGV[2], ARGV[3])
end
return answer
