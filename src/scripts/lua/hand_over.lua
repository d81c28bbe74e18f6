-- Hands the lock key (KEYS[1]) to the first live waiter of its queue (KEYS[2], liveness in
-- KEYS[3]), or deletes it when there is none, and publishes the release (on `channel`, or
-- nowhere when empty, naming `release_id`; the reservation lasts `reservation` ms).
local function hand_over(channel, release_id, reservation)
  local handed = nil
  if KEYS[2] and redis.pcall('EXISTS', KEYS[2]) == 1 then
    local t = redis.pcall('TIME')
    if not t.err then
      local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      while not handed do
        local range = redis.pcall('ZRANGE', KEYS[2], 0, 0)
        if range.err or not range[1] then break end
        local head = range[1]
        local live = tonumber(redis.pcall('HGET', KEYS[3], head)) or 0
        if type(redis.pcall('ZREM', KEYS[2], head)) ~= 'number' then break end
        redis.pcall('HDEL', KEYS[3], head)
        if live >= now then handed = head end
      end
    end
  end
  if handed then
    redis.call('SET', KEYS[1], 'handoff:' .. handed, 'PX', reservation)
    if channel ~= '' then
      local client = string.match(handed, '^([^.]+)%.')
      local own = channel
      if client then own = channel .. ':' .. client end
      redis.pcall('PUBLISH', own, release_id .. ':' .. handed)
    end
  else
    redis.call('DEL', KEYS[1])
    if channel ~= '' then redis.pcall('PUBLISH', channel, release_id) end
  end
end
