-- Whether a lock's value is our token (ARGV[1]): as we wrote it or, for a token that lets
-- waiters mark it ('n-' first), as a waiter marked it ('w-' first).
local function ours(value)
  if value == ARGV[1] then return true end
  return value and string.sub(ARGV[1], 1, 2) == 'n-' and value == 'w-' .. string.sub(ARGV[1], 3)
end
