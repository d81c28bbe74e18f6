local value = redis.call('GET', KEYS[1])
-- A silent delete (no channel: a failed round's cleanup) never takes a lock a release handed
-- to a waiter: the waiter may be counting it (`DESIGN.md` §7); its leaving passes it on.
if ARGV[2] == '' and value and string.sub(value, 1, 2) == 'h-' then return not_ours(value) end
-- The release of a lock that came through the queue (ARGV[5], its waiter's id): the waiter
-- leaves the queue here too, and a reservation or a lock handed to it here with another token
-- is passed on, so no later release hands the lock to a waiter that waits no more.
local waiter = ARGV[5]
if waiter and KEYS[2] then
  redis.pcall('ZREM', KEYS[2], waiter)
  redis.pcall('HDEL', KEYS[3], waiter, waiter .. ':h')
end
-- Our token as we wrote it, one that lets waiters mark it ('n-'): nobody waited, so there is
-- nobody to hand it to or to wake. Deleted as the server's own `DELIFEQ` does (`DESIGN.md` §3).
if value == ARGV[1] and string.sub(value, 1, 2) == 'n-' then
  redis.call('DEL', KEYS[1])
  return -1
end
-- A fenced lock's release names the fence keys: a fenced waiter is then handed its own lock,
-- fenced, instead of a reservation.
local fenced = nil
if KEYS[5] then fenced = fenced_hand_over end
if not ours(value) then
  local answer = not_ours(value)
  if waiter and (value == 'handoff:' .. waiter or handed_to(value, waiter)) then
    hand_over(ARGV[2], ARGV[3], ARGV[4], nil, nil, nil, fenced, true)
  end
  return answer
end
hand_over(ARGV[2], ARGV[3], ARGV[4], nil, nil, nil, fenced, true)
return -1
