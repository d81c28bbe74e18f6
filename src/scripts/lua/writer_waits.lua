-- How long the first writer still waiting in the lock's queue (`queue`, liveness in
-- `waiters`, as `join_queue.lua` keeps them) stays live, at least 1 ms, or nil when none
-- does: a waiting writer blocks new readers, so writers are not starved by readers that keep
-- overlapping. `pcall`s, as every queue command: under an ACL without the queue's commands
-- nobody queues, and no writer is seen waiting.
local function writer_waits(queue, waiters, now)
  if redis.pcall('EXISTS', queue) ~= 1 then return nil end
  local ids = redis.pcall('ZRANGE', queue, 0, -1)
  if type(ids) ~= 'table' or ids.err then return nil end
  for _, id in ipairs(ids) do
    local live = tonumber(redis.pcall('HGET', waiters, id)) or 0
    if live >= now then return math.max(live - now, 1) end
  end
  return nil
end
