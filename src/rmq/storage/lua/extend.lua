#!lua flags=allow-oom
--[[
  Extend the leases of deliveries still being handled.

  KEYS[1]      zset  the group's leases in one slot
  ARGV[1]      new lease expiry, epoch ms
  ARGV[2..]    delivery ids

  Returns one integer per id: 1 if extended, 0 if the lease was already gone.

  Flags: allow-oom, so that consumers draining a Redis that is out of memory keep
  their leases.
]]
--- @include "scores"
--- @include "bulk"

local until_ms = tonumber(ARGV[1])
local ids = {}
for i = 2, #ARGV do
  ids[#ids + 1] = ARGV[i]
end
local held = bulk("ZMSCORE", KEYS[1], ids)
local out, moved = {}, {}
for j, id in ipairs(ids) do
  out[j] = held[j] and 1 or 0
  if held[j] then
    moved[#moved + 1] = fmt(lease_score(until_ms, tonumber(id)))
    moved[#moved + 1] = id
  end
end
bulk("ZADD", KEYS[1], moved)
return out
