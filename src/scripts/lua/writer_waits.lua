-- The live waiters of the lock's queue (`queue`, liveness in `waiters`, as `join_queue.lua`
-- keeps them) in turn, before `place` when given: `visit(live_until, reader)` for each, where
-- `reader` says its registration is a reader's (`r`); answers the first thing a visit answers,
-- or nil. `pcall`s, as every queue command: under an ACL without the queue's commands nobody
-- queues, and nobody is seen waiting.
local function first_live(queue, waiters, now, place, visit)
  if redis.pcall('EXISTS', queue) ~= 1 then return nil end
  local ids = redis.pcall('ZRANGE', queue, 0, -1, 'WITHSCORES')
  if type(ids) ~= 'table' or ids.err then return nil end
  for i = 1, #ids, 2 do
    if place and tonumber(ids[i + 1]) >= tonumber(place) then return nil end
    local id = ids[i]
    local live = tonumber(redis.pcall('HGET', waiters, id)) or 0
    if live >= now then
      local found = visit(live, redis.pcall('HGET', waiters, id .. ':h') == 'r')
      if found then return found end
    end
  end
  return nil
end
-- How long the first writer still waiting in the queue before `place` (anywhere, without
-- one) stays live, at least 1 ms, or nil when none does: a waiting writer blocks new readers,
-- so writers are not starved by readers that keep overlapping, and a queued reader (its round
-- carrying its place) waits only for the writers that began to wait before it.
local function writer_waits(queue, waiters, now, place)
  return first_live(queue, waiters, now, place, function(live, reader)
    if not reader then return math.max(live - now, 1) end
  end)
end
-- Whether the first live waiter of the queue is a reader (`r`) or a writer (`w`), or nil
-- when none is live.
local function first_live_waiter(queue, waiters, now)
  return first_live(queue, waiters, now, nil, function(_, reader)
    if reader then return 'r' end
    return 'w'
  end)
end
