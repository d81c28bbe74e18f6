-- Deletes each of KEYS[first] to KEYS[last] that holds our token (ARGV[1]); answers how many.
local function delete_ours(first, last)
  local deleted = 0
  for i = first, last do
    if redis.call('GET', KEYS[i]) == ARGV[1] then
      redis.call('DEL', KEYS[i])
      deleted = deleted + 1
    end
  end
  return deleted
end
