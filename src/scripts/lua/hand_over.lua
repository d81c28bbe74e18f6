-- Hands the lock key (KEYS[1]) to the first live waiter of its queue (KEYS[2], liveness in
-- KEYS[3]), or deletes it when there is none, and publishes the release (on `channel`, or
-- nowhere when empty, naming `release_id`).
--
-- A waiter that registered its token (`join_queue.lua`: `<id>:h` is `<ttl> <nonce> <token>`)
-- gets its lock: the key holds `h-<token>|<id>` for the waiter's ttl, and the message names
-- the nonce of the waiter's request this master ran last, so the waiter can count the
-- hand-off without a round of its own (`DESIGN.md` §7). Any other waiter (a fenced one) gets
-- a reservation, `handoff:<id>` for `reservation` ms, which its next round turns into a lock.
local function hand_over(channel, release_id, reservation)
  local handed, registered = nil, nil
  if KEYS[2] and redis.pcall('EXISTS', KEYS[2]) == 1 then
    local t = redis.pcall('TIME')
    if not t.err then
      local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      while not handed do
        local range = redis.pcall('ZRANGE', KEYS[2], 0, 0)
        if range.err or not range[1] then break end
        local head = range[1]
        local live = tonumber(redis.pcall('HGET', KEYS[3], head)) or 0
        local registration = redis.pcall('HGET', KEYS[3], head .. ':h')
        if type(redis.pcall('ZREM', KEYS[2], head)) ~= 'number' then break end
        redis.pcall('HDEL', KEYS[3], head, head .. ':h')
        if live >= now then
          handed = head
          if type(registration) == 'string' then registered = registration end
        end
      end
    end
  end
  if handed then
    local message = release_id .. ':' .. handed
    local ttl, nonce, token = nil, nil, nil
    if registered then ttl, nonce, token = string.match(registered, '^(%d+) (%S+) (.+)$') end
    if token then
      redis.call('SET', KEYS[1], 'h-' .. token .. '|' .. handed, 'PX', ttl)
      message = message .. ':' .. nonce
    else
      redis.call('SET', KEYS[1], 'handoff:' .. handed, 'PX', reservation)
    end
    if channel ~= '' then
      local client = string.match(handed, '^([^.]+)%.')
      local own = channel
      if client then own = channel .. ':' .. client end
      redis.pcall('PUBLISH', own, message)
    end
  else
    redis.call('DEL', KEYS[1])
    if channel ~= '' then redis.pcall('PUBLISH', channel, release_id) end
  end
end
