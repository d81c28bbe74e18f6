local value = redis.call('GET', KEYS[1])
-- As `undo_and_queue.lua`, for a read-write lock's writer (its readers in KEYS[4]).
if ARGV[2] ~= '' and handed_to(value, ARGV[2]) then return -2 end
local answer = -2
if ours(value) then
  redis.call('DEL', KEYS[1])
  answer = -1
elseif value then
  answer = redis.call('PTTL', KEYS[1])
  if answer == -1 then answer = -3 end
end
join_queue(ARGV[2], ARGV[3], ARGV[4], ARGV[8], ARGV[9])
-- A writer's key that is gone is handed over only where no reader holds a share: with
-- readers, there is no lock to hand over (their releases wake the writers instead).
if not value and ARGV[5] and not readers_live(KEYS[4], server_ms()) then
  hand_over(ARGV[5], ARGV[6], ARGV[7])
end
return answer
