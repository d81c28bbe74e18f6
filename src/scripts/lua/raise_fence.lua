-- The second half of a fenced confirmation (`confirm_fence.lua`, `confirm_fence_read.lua`):
-- only while the marker (KEYS[3]) names the server's current term (`-6` on a server that is
-- no master, `-7` otherwise) and, for a grant made before the decision (ARGV[3] its epoch),
-- no re-seed has read the counter since (`-7`), raises the counter (KEYS[2]) to at least the
-- token (ARGV[2]) and answers `-1`.
local function raise_fence()
  local term = fence_term(ARGV[4])
  if not term then return -6 end
  if redis.call('HGET', KEYS[3], 'run') ~= term then return -7 end
  if ARGV[3] ~= '' and (tonumber(redis.call('HGET', KEYS[3], 'epoch')) or 0) ~= tonumber(ARGV[3]) then
    return -7
  end
  local fence = tonumber(redis.call('GET', KEYS[2]) or '0') or 0
  if fence < tonumber(ARGV[2]) then redis.call('SET', KEYS[2], ARGV[2]) end
  return -1
end
