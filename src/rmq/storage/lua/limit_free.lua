#!lua flags=allow-oom
--[[
  Settled deliveries (acknowledged, failed, released) of a limited group give back their
  permits, one token per unit on the group's wake list for the consumers waiting on it.

  KEYS[1]      permits: zset, delivery id -> deadline, epoch ms
  KEYS[2]      waiters: zset, waiter id -> deadline of its wait, epoch ms
  KEYS[3]      wake list: list of tokens, one per unit of capacity given back to a waiter
  ARGV[1]      now, epoch ms
  ARGV[2..]    the settled delivery ids

  Returns how many held a permit; one already gone (expired with its lease) frees nothing.

  Flags: allow-oom, since settling frees memory.
]]
--- @include "capacity"

local freed = 0
for from = 2, #ARGV, 1000 do  -- in pieces: unpack() fails near 8000 values
  freed = freed + rcall("ZREM", KEYS[1], unpack(ARGV, from, math.min(from + 999, #ARGV)))
end
give_back(KEYS[2], KEYS[3], tonumber(ARGV[1]), freed)
return freed
