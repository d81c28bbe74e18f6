local epoch = seeded_epoch(5, ARGV[#ARGV])
if not epoch then return -6 end
-- A queued reader's arguments come before the run id (ARGV[3..8], as `ACQUIRE_READ`'s).
local q = {}
if #ARGV > 3 then q = ARGV end
local refused = take_share(q[3], q[4], q[5], q[6], q[7], q[8])
if refused then return refused end
-- The counter as it stands (a read raises nothing), or the resource's own older counter
-- where that is larger (a write folds it in).
local counter = tonumber(redis.call('GET', KEYS[5]) or '0') or 0
if KEYS[7] then
  local legacy = tonumber(redis.call('GET', KEYS[7]) or '')
  if legacy and legacy > counter then counter = legacy end
end
return {-1, counter, epoch}
