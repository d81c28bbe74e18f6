-- A fenced release's hand-over of the lock (KEYS[1]) to a fenced waiter (`hand_over.lua`),
-- with the fence keys (KEYS[4] the slot's counter, KEYS[5] its re-seed marker, optional
-- KEYS[6] the per-resource counter): only on a master seeded for its current term, read here
-- (no client's connection vouches for it), sets the key to `value` for `ttl` ms and raises
-- the counter, as a fenced grant does. `{counter, epoch}`, or nil (unseeded: nothing set).
local function fenced_hand_over(value, ttl)
  local info = redis.pcall('INFO', 'server')
  if type(info) ~= 'string' then return nil end
  local run = string.match(info, 'run_id:(%x+)')
  if not run then return nil end
  local epoch = seeded_epoch(4, run)
  if not epoch then return nil end
  redis.call('SET', KEYS[1], value, 'PX', ttl)
  return {raise_counter(4), epoch}
end
