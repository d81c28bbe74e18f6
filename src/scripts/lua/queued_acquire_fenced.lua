local epoch = seeded_epoch(4, ARGV[7])
if not epoch then return -6 end
local token = take_turn()
if token then return take_fenced(4, epoch, token, false) end
-- Registered as a fenced waiter (`f<ttl>`, `hand_over.lua`) when the round carries a nonce.
local nonce = nil
if ARGV[6] ~= '' then nonce = ARGV[6] end
join_queue(ARGV[3], ARGV[4], ARGV[5], 'f' .. ARGV[2], nonce)
local ttl = redis.call('PTTL', KEYS[1])
if ttl == -1 then return -3 end
return ttl
