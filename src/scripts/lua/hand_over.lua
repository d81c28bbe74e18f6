-- Hands the lock key (`key`, KEYS[1] unless given) to the first live waiter of its queue
-- (`queue`, liveness in `waiters`: KEYS[2] and KEYS[3] unless given), or deletes it when
-- there is none, and publishes the release (on `channel`, or nowhere when empty, naming
-- `release_id`). A semaphore's permits share one queue, so its scripts name the keys.
--
-- A waiter that registered its token (`join_queue.lua`: `<id>:h` is `<ttl> <nonce> <token>`)
-- gets its lock: the key holds `h-<token>|<id>` for the waiter's ttl, and the message names
-- the nonce of the waiter's request this master ran last, so the waiter can count the
-- hand-off without a round of its own (`DESIGN.md` §7). A fenced waiter's registration
-- (its ttl written `f<ttl>`) is handed its lock only by a fenced release (`fenced`, see
-- `fence_hand_over.lua`), which raises the fence counter as it sets the key, and the
-- message also names the counter and the epoch: `:<nonce>:<counter>:<epoch>`. Any other
-- waiter (a fenced one the release cannot fence for) gets a reservation, `handoff:<id>` for
-- `reservation` ms, which its next round turns into a lock. A reader of a read-write lock
-- (`<id>:h` is `r`) at the head gets, with the run of readers it heads, the readers' mark
-- for `reservation` ms, and the message names nobody (`DESIGN.md` §7c).
--
-- Waiters that are no longer live leave the queue here. The waiter handed its own lock leaves
-- too: it holds it here. A waiter given a reservation of the lock (`keep_reserved`) stays
-- queued until its round takes it (`take_turn.lua`) or it leaves (`dequeue.lua`): should the
-- reservation lapse first, new readers must still find it waiting and queue behind it
-- (`DESIGN.md` §7c). Its liveness is cut to two reservations from now (its round renews
-- it), so a waiter that never comes (it crashed, or won elsewhere and its leaving missed
-- this master) is not reserved the lock release after release for the rest of its
-- liveness. A semaphore's waiter leaves with its reservation of a permit, so the next
-- release of another permit reserves that one for the next waiter (`DESIGN.md` §7a).
local function hand_over(channel, release_id, reservation, key, queue, waiters, fenced, keep_reserved)
  key, queue, waiters = key or KEYS[1], queue or KEYS[2], waiters or KEYS[3]
  local handed, registered, live_until, now = nil, nil, 0, 0
  if queue and redis.pcall('EXISTS', queue) == 1 then
    local t = redis.pcall('TIME')
    if not t.err then
      now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
      while not handed do
        local range = redis.pcall('ZRANGE', queue, 0, 0)
        if range.err or not range[1] then break end
        local head = range[1]
        local live = tonumber(redis.pcall('HGET', waiters, head)) or 0
        if live >= now then
          handed, live_until = head, live
          local registration = redis.pcall('HGET', waiters, head .. ':h')
          if type(registration) == 'string' then registered = registration end
        else
          if type(redis.pcall('ZREM', queue, head)) ~= 'number' then break end
          redis.pcall('HDEL', waiters, head, head .. ':h')
        end
      end
    end
  end
  if handed and registered == 'r' then
    -- A reader heads the queue: the lock goes to the run of readers it heads (those queued
    -- before the first live writer, `take_share.lua`). The key becomes the readers' mark for
    -- `reservation` ms, which refuses writes and admits those readers' rounds, and the message
    -- names nobody, so it wakes every waiting reader. Readers stay queued until their round
    -- takes their share; the head's liveness is cut as a reserved writer's is.
    redis.call('SET', key, 'readers', 'PX', reservation)
    local cut = now + 2 * tonumber(reservation)
    if live_until > cut then redis.pcall('HSET', waiters, handed, cut) end
    if channel ~= '' then redis.pcall('PUBLISH', channel, release_id) end
  elseif handed then
    local message = release_id .. ':' .. handed
    local f, ttl, nonce, token = nil, nil, nil, nil
    if registered then f, ttl, nonce, token = string.match(registered, '^(f?)(%d+) (%S+) (.+)$') end
    local taken = nil
    if token and f == 'f' then
      if fenced then taken = fenced('h-' .. token .. '|' .. handed, ttl) end
      if taken then message = message .. ':' .. nonce .. ':' .. taken[1] .. ':' .. taken[2] end
    elseif token then
      redis.call('SET', key, 'h-' .. token .. '|' .. handed, 'PX', ttl)
      message = message .. ':' .. nonce
      taken = true
    end
    if not taken then
      redis.call('SET', key, 'handoff:' .. handed, 'PX', reservation)
    end
    if taken or not keep_reserved then
      redis.pcall('ZREM', queue, handed)
      redis.pcall('HDEL', waiters, handed, handed .. ':h')
    else
      local cut = now + 2 * tonumber(reservation)
      if live_until > cut then redis.pcall('HSET', waiters, handed, cut) end
    end
    if channel ~= '' then
      local client = string.match(handed, '^([^.]+)%.')
      local own = channel
      if client then own = channel .. ':' .. client end
      redis.pcall('PUBLISH', own, message)
    end
  else
    redis.call('DEL', key)
    if channel ~= '' then redis.pcall('PUBLISH', channel, release_id) end
  end
end
