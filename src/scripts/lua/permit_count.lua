-- A semaphore's record of its number of permits (`record`, see `ACQUIRE_PERMIT`): the answer
-- `{-8, that number, 0}` when it names another number than `permits`, else nil.
local function other_permit_count(record, permits)
  local declared = redis.call('GET', record)
  if declared and declared ~= tostring(permits) then
    return {-8, tonumber(declared) or -1, 0}
  end
  return nil
end
-- Keeps the record naming `permits` for at least `ttl` ms, beside a permit granted or renewed
-- for that long: never shortened, so it outlives every holder's permit.
local function keep_permit_count(record, permits, ttl)
  if redis.call('PTTL', record) < tonumber(ttl) then
    redis.call('SET', record, permits, 'PX', ttl)
  end
end
