-- With the semaphore's queue (ARGV[4], the reservation, and its keys last), a released permit
-- is handed to the first live waiter, as a lock's is.
local queued = ARGV[4] ~= nil and #KEYS > 1
local last = #KEYS
if queued then last = #KEYS - 2 end
local value = redis.call('GET', KEYS[1])
local answer = -1
if value == ARGV[1] then
  if queued then
    hand_over(ARGV[2], ARGV[3], ARGV[4], KEYS[1], KEYS[last + 1], KEYS[last + 2])
  else
    redis.call('DEL', KEYS[1])
    redis.pcall('PUBLISH', ARGV[2], ARGV[3])
  end
else
  answer = not_ours(value)
end
if KEYS[2] then
  delete_ours(3, last)
  forget_permit_count(2, 3, last)
end
return answer
