--[[
  Extend the leases of deliveries still being handled.

  KEYS[1]      zset  the group's leases in one slot
  ARGV[1]      new lease expiry, epoch ms
  ARGV[2..]    delivery ids

  Returns one integer per id: 1 if extended, 0 if the lease was already gone.
]]
local rcall = redis.call
local out = {}
for i = 2, #ARGV do
  if rcall("ZSCORE", KEYS[1], ARGV[i]) then
    rcall("ZADD", KEYS[1], ARGV[1], ARGV[i])
    out[#out + 1] = 1
  else
    out[#out + 1] = 0
  end
end
return out
