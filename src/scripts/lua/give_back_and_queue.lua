local permits = #KEYS - 3
join_queue(ARGV[2], ARGV[3], ARGV[4], nil, nil, KEYS[permits + 2], KEYS[permits + 3])
delete_ours(1, permits)
forget_permit_count(permits + 1, 1, permits)
return -1
