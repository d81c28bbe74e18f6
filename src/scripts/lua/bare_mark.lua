-- The readers' mark (on `key`) with no live share under it: held for the run of queued
-- readers at the head of the queue (`queue`, liveness in `waiters`) by a hand-over
-- (`hand_over.lua`), found by a reader's round or cleanup, or by a reader leaving the queue. With a writer first among the live
-- waiters (one that began to wait before the readers, and joined after the hand-over), it
-- is passed on as a release would, to that writer; with a reader first, it stays for that
-- reader's run, for a reservation at most, and wakes nobody (passed on, it would go back to
-- the same run and wake every reader again, each refused again: `model::rwqueue`); with
-- nobody waiting, it goes.
local function pass_on_bare_mark(channel, release_id, reservation, now, key, queue, waiters)
  local first = first_live_waiter(queue, waiters, now)
  if first == 'w' then
    hand_over(channel, release_id, reservation, key, queue, waiters, nil, true)
  elseif first == 'r' then
    if redis.call('PTTL', key) > tonumber(reservation) then
      redis.call('PEXPIRE', key, reservation)
    end
  else
    redis.call('DEL', key)
  end
end
