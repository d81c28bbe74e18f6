local function join_queue(id, live, place)
  mark_waited()
  local t = redis.pcall('TIME')
  if t.err then return end
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  live = tonumber(live)
  if type(redis.pcall('ZADD', KEYS[2], 'NX', place, id)) == 'number' then
    redis.pcall('HSET', KEYS[3], id, now + live)
    for i = 2, 3 do
      if redis.call('PTTL', KEYS[i]) < live then redis.pcall('PEXPIRE', KEYS[i], live) end
    end
  end
end
