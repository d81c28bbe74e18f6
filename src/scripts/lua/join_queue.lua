-- Joins the queue (`queue`, KEYS[2] unless given) as waiter `id` at `place`, or keeps its
-- place, and renews its liveness (in `waiters`, KEYS[3] unless given) for `live` ms; with a
-- `nonce`, registers this request's token (ARGV[1]) and `ttl` for a hand-off
-- (`hand_over.lua`) under `<id>:h`; with `ttl` `r` and no nonce, registers a reader of a
-- read-write lock (`r`), which a release hands over to with the run of readers it heads.
local function join_queue(id, live, place, ttl, nonce, queue, waiters)
  queue, waiters = queue or KEYS[2], waiters or KEYS[3]
  mark_waited()
  local t = redis.pcall('TIME')
  if t.err then return end
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  live = tonumber(live)
  if type(redis.pcall('ZADD', queue, 'NX', place, id)) == 'number' then
    redis.pcall('HSET', waiters, id, now + live)
    if nonce then
      redis.pcall('HSET', waiters, id .. ':h', ttl .. ' ' .. nonce .. ' ' .. ARGV[1])
    elseif ttl == 'r' then
      redis.pcall('HSET', waiters, id .. ':h', 'r')
    end
    for _, key in ipairs({queue, waiters}) do
      if redis.call('PTTL', key) < live then redis.pcall('PEXPIRE', key, live) end
    end
  end
end
