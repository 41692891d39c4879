#!lua flags=allow-oom
--[[
  On a Redis Cluster, where a limited group's permits (on the topic's tag) and its leases (on
  each slot's) cannot change in one call: move the permits of deliveries whose leases are to
  be extended, before their leases are (docs/limits.md). Only a permit still held moves: one
  gone (it expired, and a claim may have taken its unit since) is not brought back, and its
  delivery's lease is then not extended. A permit never moves earlier than it was, so that
  whatever round trip the extending process dies after, no lease outlives its permit.

  KEYS[1]      permits: zset, delivery id "slot-id" -> deadline, epoch ms
  ARGV[1]      the new lease expiry, epoch ms
  ARGV[2..]    the deliveries' ids "slot-id"

  Returns one integer per id: 1 if its permit was held (its deadline now at least ARGV[1]),
  else 0.

  Flags: allow-oom, so that consumers draining a Redis that is out of memory keep their
  units as they keep their leases (extend.lua).
]]
--- @include "bulk"

local until_ms = tonumber(ARGV[1])
local ids = {}
for i = 2, #ARGV do
  ids[#ids + 1] = ARGV[i]
end
local deadlines = bulk("ZMSCORE", KEYS[1], ids)
local out, moved = {}, {}
for j, id in ipairs(ids) do
  out[j] = deadlines[j] and 1 or 0
  if deadlines[j] and tonumber(deadlines[j]) < until_ms then
    moved[#moved + 1] = ARGV[1]
    moved[#moved + 1] = id
  end
end
bulk("ZADD", KEYS[1], moved)
return out
