local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) <= server_ms() then return -2 end
return raise_fence()
