-- Marks the lock (KEYS[1]) as waited for when its value lets waiters mark it ('n-' first
-- becomes 'w-'): a server's own compare-and-delete no longer matches it, so its release runs
-- the script, which hands the lock over and publishes. A `pcall`: a server out of memory
-- (`noeviction`) refuses the write, and the waiter's step goes on without it.
local function mark_waited()
  local value = redis.call('GET', KEYS[1])
  if value and string.sub(value, 1, 2) == 'n-' then
    redis.pcall('SET', KEYS[1], 'w-' .. string.sub(value, 3), 'KEEPTTL')
  end
end
