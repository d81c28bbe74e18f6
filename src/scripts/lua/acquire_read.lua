local refused = take_share()
if refused then return refused end
return -1
