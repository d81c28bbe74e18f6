-- Joins the queue (KEYS[2]) as waiter `id` at `place`, or keeps its place, and renews its
-- liveness (in KEYS[3]) for `live` ms; with a `nonce`, registers this request's token
-- (ARGV[1]) and `ttl` for a hand-off (`hand_over.lua`) under `<id>:h`.
local function join_queue(id, live, place, ttl, nonce)
  mark_waited()
  local t = redis.pcall('TIME')
  if t.err then return end
  local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
  live = tonumber(live)
  if type(redis.pcall('ZADD', KEYS[2], 'NX', place, id)) == 'number' then
    redis.pcall('HSET', KEYS[3], id, now + live)
    if nonce then redis.pcall('HSET', KEYS[3], id .. ':h', ttl .. ' ' .. nonce .. ' ' .. ARGV[1]) end
    for i = 2, 3 do
      if redis.call('PTTL', KEYS[i]) < live then redis.pcall('PEXPIRE', KEYS[i], live) end
    end
  end
end
