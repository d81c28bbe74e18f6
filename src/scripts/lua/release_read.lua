local now = server_ms()
local score = redis.call('ZSCORE', KEYS[2], ARGV[1])
local answer = -2
if score then
  redis.call('ZREM', KEYS[2], ARGV[1])
  if tonumber(score) > now then answer = -1 end
end
-- A release names its channel (ARGV[2]); a failed round's cleanup leaves it empty, and its
-- hand-overs publish on ARGV[5], if given. A cleanup whose acquire waits on (ARGV[6..8]: the
-- reader's waiter id, liveness and place) joins the queue as a reader.
local release = ARGV[2] ~= ''
local channel = ARGV[2]
if not release then channel = ARGV[5] or '' end
local id = ARGV[6]
if not release and id then join_queue(id, ARGV[7], ARGV[8], 'r', nil, KEYS[3], KEYS[4]) end
local left = readers_live(KEYS[2], now)
-- The set and the mark last as long as the longest live share, no longer: a released longer
-- share must not keep writers out, nor its set stay, after the others expire.
if left then redis.call('PEXPIRE', KEYS[2], left + 1) end
local value = redis.call('GET', KEYS[1])
-- Joining, a cleanup hands over a lock it finds free, as a writer's `UNDO_AND_QUEUE` does: the
-- queue's first waiter, perhaps this reader, would otherwise wait for a timer.
if not release and id and not value then
  hand_over(channel, ARGV[3], ARGV[4], KEYS[1], KEYS[3], KEYS[4], nil, true)
  return answer
end
if value ~= 'readers' then return answer end
if left then
  redis.call('PEXPIRE', KEYS[1], left + 1)
elseif release or answer == -1 then
  -- The last share gone (a release's, or a cleanup's own: nobody else knows), the lock is
  -- free here, as after a writer's release: it is handed to the first queued waiter (or
  -- deleted, and the release published).
  hand_over(channel, ARGV[3], ARGV[4], KEYS[1], KEYS[3], KEYS[4], nil, true)
else
  -- A bare mark a cleanup found: a run of queued readers' (a cleanup does not take it from
  -- them), a writer's before them, or nobody's.
  pass_on_bare_mark(channel, ARGV[3], ARGV[4], now, KEYS[1], KEYS[3], KEYS[4])
end
return answer
