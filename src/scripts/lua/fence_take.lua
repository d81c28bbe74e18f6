-- The fence epoch of this master for the lock's slot while its re-seed marker (KEYS[c + 1])
-- names the server's current term (`run` the server's `run_id`); nil when it does not (the
-- master started, or its dataset was replaced, since the counter was last re-seeded).
local function seeded_epoch(c, run)
  local term = fence_term(run)
  if not term then return nil end
  local seed = redis.call('HMGET', KEYS[c + 1], 'run', 'epoch')
  if seed[1] ~= term then return nil end
  return tonumber(seed[2]) or 0
end
-- Folds the resource's own older counter (KEYS[c + 2], when given) into the slot's counter
-- (KEYS[c]), the larger winning, and raises it: the new counter.
local function raise_counter(c)
  if KEYS[c + 2] then
    local legacy = tonumber(redis.call('GET', KEYS[c + 2]) or '')
    if legacy then
      if legacy > (tonumber(redis.call('GET', KEYS[c]) or '0') or 0) then
        redis.call('SET', KEYS[c], legacy)
      end
      redis.call('DEL', KEYS[c + 2])
    end
  end
  return redis.call('INCR', KEYS[c])
end
-- Sets the lock key (KEYS[1]) to `value` for ARGV[2] ms, only while absent when `nx`; once
-- set, raises the counter (`raise_counter`). The grant ({-1, counter, epoch}), or nil when
-- the key was not set.
local function take_fenced(c, epoch, value, nx)
  local set
  if nx then
    set = redis.call('SET', KEYS[1], value, 'NX', 'PX', ARGV[2])
  else
    set = redis.call('SET', KEYS[1], value, 'PX', ARGV[2])
  end
  if not set then return nil end
  return {-1, raise_counter(c), epoch}
end
