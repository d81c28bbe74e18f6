-- Whether a lock's value is our token (ARGV[1]): as we wrote it; for a token that lets
-- waiters mark it ('n-' first), as a waiter marked it ('w-' first); or as a release handed it
-- to us while we waited ('h-<token>|<waiter id>', `hand_over.lua`).
local function ours(value)
  if value == ARGV[1] then return true end
  if not value then return false end
  if string.sub(value, 1, #ARGV[1] + 3) == 'h-' .. ARGV[1] .. '|' then return true end
  return string.sub(ARGV[1], 1, 2) == 'n-' and value == 'w-' .. string.sub(ARGV[1], 3)
end
