-- This server's fence term, `run .. '/' .. replication id`, or nil on a server that is no
-- master (or gives no replication id).
local function fence_term(run)
  local replication = redis.call('INFO', 'replication')
  local replid = string.match(replication, 'master_replid:(%x+)')
  if not replid or not string.find(replication, 'role:master', 1, true) then return nil end
  return run .. '/' .. replid
end
