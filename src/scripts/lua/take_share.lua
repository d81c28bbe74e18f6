-- A read's share on this master (`acquire_read.lua`, `acquire_read_fenced.lua`): refused
-- (answering what the round reports) while the lock key (KEYS[1]) holds anything but the
-- readers' mark, marking a markable holder as waited for (its release then runs the script
-- and publishes, where the server's own compare-and-delete would wake no reader), or while a
-- writer is queued for the lock (KEYS[3], KEYS[4]) and live (before `place`, for a queued
-- reader); else adds the share (ARGV[1], for ARGV[2] ms) to the readers (KEYS[2]), keeps
-- their set and the mark for at least as long, and answers nil.
--
-- A queued reader's round (`id`, with its liveness `live`, its `place`, and what a hand-over
-- needs: `channel`, `release_id`, `reservation`) leaves the queue as it takes its share, and
-- when refused joins again (keeping its place, renewing its liveness). Refused by a writer
-- queued before it where the key is the readers' mark with no live share, it passes the mark
-- on to that writer if it is the first live waiter (`bare_mark.lua`): a release handed the
-- lock to a run of readers, and a writer with an earlier place joined after it, which would
-- otherwise wait for the mark to lapse.
local function take_share(id, live, place, channel, release_id, reservation)
  local now = server_ms()
  -- A queued reader's place here is the one this master keeps (a place drawn again while no
  -- voter's clock was known does not move it: `join_queue.lua` keeps the first).
  if id then
    local kept = tonumber(redis.pcall('ZSCORE', KEYS[3], id))
    if kept then place = kept end
  end
  local value = redis.call('GET', KEYS[1])
  if value and value ~= 'readers' then
    mark_waited()
    if id then join_queue(id, live, place, 'r', nil, KEYS[3], KEYS[4]) end
    local ttl = redis.call('PTTL', KEYS[1])
    if ttl == -1 then return -3 end
    return ttl
  end
  local waits = writer_waits(KEYS[3], KEYS[4], now, place)
  if waits then
    if id then
      join_queue(id, live, place, 'r', nil, KEYS[3], KEYS[4])
      if value == 'readers' and not readers_live(KEYS[2], now) then
        pass_on_bare_mark(channel, release_id, reservation, now, KEYS[1], KEYS[3], KEYS[4])
      end
    end
    return waits
  end
  if id then
    redis.pcall('ZREM', KEYS[3], id)
    redis.pcall('HDEL', KEYS[4], id, id .. ':h')
  end
  readers_live(KEYS[2], now)
  local ttl = tonumber(ARGV[2])
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
  if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
  hold_for_readers(ttl)
  return nil
end
