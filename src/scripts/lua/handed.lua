-- Whether a lock's value (from GET: false when there is none) was handed by a release to the
-- waiter `waiter` with that waiter's own token (`h-<token>|<waiter id>`, see `hand_over.lua`):
-- its lock, set for its full ttl, whichever of its requests the release answered.
local function handed_to(value, waiter)
  if not value or string.sub(value, 1, 2) ~= 'h-' then return false end
  return string.sub(value, -(#waiter + 1)) == '|' .. waiter
end
