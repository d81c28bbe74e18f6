local permits = #KEYS - 3
local record, queue, waiters = KEYS[permits + 1], KEYS[permits + 2], KEYS[permits + 3]
local id, live, place = ARGV[permits + 3], ARGV[permits + 4], ARGV[permits + 5]
local other = other_permit_count(record, permits)
if other then return other end
-- The permits a release reserved for this waiter here.
local mine = 'handoff:' .. id
local reserved = {}
for i = 1, permits do
  if redis.call('GET', KEYS[i]) == mine then reserved[#reserved + 1] = i end
end
local shortest = -1
for i = 1, permits do
  local key = KEYS[i]
  local value = redis.call('GET', key)
  local reservation = value and string.sub(value, 1, 8) == 'handoff:'
  if not value or value == mine or (reservation and #reserved > 0) then
    redis.pcall('ZREM', queue, id)
    redis.pcall('HDEL', waiters, id, id .. ':h')
    -- Its other reservations here go on: the first to the waiter whose reservation it took
    -- (with that reservation's ttl), the rest as a release would pass them.
    local displaced = nil
    if reservation and value ~= mine then displaced = value end
    local left = redis.call('PTTL', key)
    for _, r in ipairs(reserved) do
      if r ~= i then
        if displaced then
          redis.call('SET', KEYS[r], displaced, 'PX', math.max(left, 1))
          displaced = nil
        else
          hand_over(ARGV[permits + 6], ARGV[permits + 7], ARGV[permits + 8], KEYS[r], queue, waiters)
        end
      end
    end
    redis.call('SET', key, ARGV[1], 'PX', ARGV[2])
    keep_permit_count(record, permits, ARGV[2])
    return {-1, tonumber(ARGV[i + 2]), 0}
  end
  local ttl = redis.call('PTTL', key)
  if ttl >= 0 and (shortest < 0 or ttl < shortest) then shortest = ttl end
end
join_queue(id, live, place, nil, nil, queue, waiters)
if shortest < 0 then return -3 end
return shortest
