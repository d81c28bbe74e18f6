-- A read's share on this master (`acquire_read.lua`, `acquire_read_fenced.lua`): refused
-- (answering what the round reports) while the lock key (KEYS[1]) holds anything but the
-- readers' mark, marking a markable holder as waited for (its release then runs the script
-- and publishes, where the server's own compare-and-delete would wake no reader), or while a
-- waiter for the lock is queued (KEYS[3], KEYS[4]) and live; else adds the share (ARGV[1],
-- for ARGV[2] ms) to the readers (KEYS[2]), keeps their set and the mark for at least as
-- long, and answers nil.
local function take_share()
  local now = server_ms()
  local value = redis.call('GET', KEYS[1])
  if value and value ~= 'readers' then
    mark_waited()
    local ttl = redis.call('PTTL', KEYS[1])
    if ttl == -1 then return -3 end
    return ttl
  end
  local waits = writer_waits(KEYS[3], KEYS[4], now)
  if waits then return waits end
  readers_live(KEYS[2], now)
  local ttl = tonumber(ARGV[2])
  redis.call('ZADD', KEYS[2], now + ttl, ARGV[1])
  if redis.call('PTTL', KEYS[2]) < ttl then redis.call('PEXPIRE', KEYS[2], ttl) end
  hold_for_readers(ttl)
  return nil
end
