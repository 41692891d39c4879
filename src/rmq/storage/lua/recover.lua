#!lua flags=allow-oom
--[[
  Return deliveries of one group in one slot whose lease expired to pending, counting the
  attempt (the consumer died, froze or lost its connection): the same path as a failure,
  with the error "lease expired".

  KEYS[1]      string  the slot clock
  KEYS[2..10]  the 9 group keys of includes/group_keys.lua
  KEYS[11]     with a heads index (ARGV[3]): the group's heads_ready (includes/heads.lua)
  KEYS[12]     with a heads index: the group's heads_delayed
  ARGV[1]      now, epoch ms
  ARGV[2]      wake channel
  ARGV[3]      heads index: this slot's number, or "" when the topic keeps none
  ARGV[4]      max_retries
  ARGV[5]      retry backoff before the first retry, ms
  ARGV[6]      retry backoff cap, ms
  ARGV[7]      at most this many deliveries' leases per call (whole leases, at least one:
               a lease covers a claim's share of the slot)

  Returns {retried, dead}.

  Flags: allow-oom, since it only moves messages already stored (back to pending or
  to the dead letters), so that consumers can drain a Redis that is out of memory.
]]
--- @include "scores"
--- @include "pending"
--- @include "group_keys"
--- @include "heads"
--- @include "settle"
--- @include "leases"

local now = tonumber(ARGV[1])
local k = group_keys(2)
if ARGV[3] ~= "" then
  attach_heads(k, KEYS[11], KEYS[12], ARGV[3])
end
local expired = expired_deliveries(k, now, tonumber(ARGV[7]))
if #expired == 0 then
  return {0, 0}
end
local clock = open_clock(KEYS[1], now)
local counts = {retried = 0, dead = 0}
for _, id in ipairs(expired) do
  local outcome = fail(k, id, "lease expired", now, clock,
    tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]))
  if outcome then  -- nil: a lease of its own outlived its record (settled already)
    counts[outcome] = counts[outcome] + 1
  end
end
count_outcomes(k, counts)
finish(clock, ARGV[2])
return {counts.retried, counts.dead}
