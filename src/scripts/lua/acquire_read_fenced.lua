local epoch = seeded_epoch(5, ARGV[#ARGV])
if not epoch then return -6 end
local id, live, place, channel, release_id, reservation = nil, nil, nil, nil, nil, nil
if #ARGV > 3 then id, live, place, channel, release_id, reservation = ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8] end
local refused = take_share(id, live, place, channel, release_id, reservation)
if refused then return refused end
-- The counter as it stands (a read raises nothing), or the resource's own older counter
-- where that is larger (a write folds it in).
local counter = tonumber(redis.call('GET', KEYS[5]) or '0') or 0
if KEYS[7] then
  local legacy = tonumber(redis.call('GET', KEYS[7]) or '')
  if legacy and legacy > counter then counter = legacy end
end
return {-1, counter, epoch}
