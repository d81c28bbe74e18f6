-- Deletes a semaphore's record of its number of permits (KEYS[record]) once none of its
-- permits (KEYS[first] to KEYS[last]) is held, and only when the record names that number: a
-- client of another number cannot see every permit the record's holders may hold. (PTTL, not
-- EXISTS: an ACL without the queue's `+exists` still serves semaphores.)
local function forget_permit_count(record, first, last)
  if redis.call('GET', KEYS[record]) ~= tostring(last - first + 1) then return end
  for i = first, last do
    if redis.call('PTTL', KEYS[i]) ~= -2 then return end
  end
  redis.call('DEL', KEYS[record])
end
