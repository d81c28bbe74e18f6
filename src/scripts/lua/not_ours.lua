-- The answer when KEYS[1] does not hold our token: -2 when it is missing, else its owner's
-- remaining ttl in ms, -3 when it has no expiry.
local function not_ours(value)
  if not value then return -2 end
  local ttl = redis.call('PTTL', KEYS[1])
  if ttl == -1 then return -3 end
  return ttl
end
