-- The readers' mark (KEYS[1]) with no live share under it: held for the run of queued
-- readers at the head of the queue (KEYS[3], KEYS[4]) by a hand-over (`hand_over.lua`), or
-- left by a share a failed round's cleanup just removed. With a writer first among the live
-- waiters (one that began to wait before the readers, and joined after the hand-over), it
-- is passed on as a release would, to that writer; with a reader first, it stays for that
-- reader's run, for a reservation at most, and wakes nobody (passed on, it would go back to
-- the same run and wake every reader again, each refused again: `model::rwqueue`); with
-- nobody waiting, it goes.
local function pass_on_bare_mark(channel, release_id, reservation, now)
  local first = first_live_waiter(KEYS[3], KEYS[4], now)
  if first == 'w' then
    hand_over(channel, release_id, reservation, KEYS[1], KEYS[3], KEYS[4], nil, true)
  elseif first == 'r' then
    if redis.call('PTTL', KEYS[1]) > tonumber(reservation) then
      redis.call('PEXPIRE', KEYS[1], reservation)
    end
  else
    redis.call('DEL', KEYS[1])
  end
end
