local refused = take_share(ARGV[3], ARGV[4], ARGV[5], ARGV[6], ARGV[7], ARGV[8])
if refused then return refused end
return -1
