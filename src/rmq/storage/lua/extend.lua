#!lua flags=allow-oom
--[[
  Extend the leases of deliveries still being handled: each gets a lease of its own (its
  bare id in the leases zset, includes/leases.lua), which decides for it from now on
  whatever the lease of its claim's range says.

  KEYS[1]      hash  the group's in-flight records in one slot
  KEYS[2]      zset  the group's leases in one slot
  ARGV[1]      new lease expiry, epoch ms
  ARGV[2..]    delivery ids

  Returns one integer per id: 1 if extended, 0 if the delivery was no longer in flight.

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
local held = bulk("HMGET", KEYS[1], ids)
local out, moved = {}, {}
for j, id in ipairs(ids) do
  out[j] = held[j] and 1 or 0
  if held[j] then
    moved[#moved + 1] = fmt(lease_score(until_ms, tonumber(id)))
    moved[#moved + 1] = id
  end
end
bulk("ZADD", KEYS[2], moved)
return out
