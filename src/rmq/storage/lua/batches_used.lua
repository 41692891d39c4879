#!lua flags=no-writes,allow-oom
--[[
  How many of a group's claims are in flight under its max_batches, by `now`: what stats
  show as the units of the max_batches in use. Reads only: a claim is in flight while one
  of its ids holds a permit whose deadline is after `now` (includes/limit_grant.lua, whose
  next grant removes the claims over and the permits past their deadline).

  KEYS[1]      batches: hash, a claim in flight -> its ids (includes/limit_grant.lua)
  KEYS[2]      permits: zset, delivery id (or placeholder "token:i") -> deadline, epoch ms
  ARGV[1]      now, epoch ms

  Returns the count.

  Flags: no-writes, allow-oom: sizes must be readable when Redis is out of memory.
]]
--- @include "limit_grant"

local now = tonumber(ARGV[1])
local entries = rcall("HGETALL", KEYS[1])
local used = 0
for i = 2, #entries, 2 do
  local ids = batch_ids(entries[i])
  local live = false
  for from = 1, #ids, 1000 do  -- in pieces: unpack() fails near 8000 values
    local scores = rcall("ZMSCORE", KEYS[2], unpack(ids, from, math.min(from + 999, #ids)))
    for _, score in ipairs(scores) do
      if score and tonumber(score) > now then
        live = true
        break
      end
    end
    if live then break end
  end
  if live then used = used + 1 end
end
return used
