#!lua flags=allow-oom
--[[
  Deliveries of one group in one slot failed: each goes back to pending after its retry
  backoff, or to the dead-letter queue when it has been delivered 1 + max_retries times.

  KEYS[1]      string  the slot clock
  KEYS[2..10]  the 9 group keys of includes/group_keys.lua
  KEYS[11]     with a heads index (ARGV[3]): the group's heads_ready (includes/heads.lua)
  KEYS[12]     with a heads index: the group's heads_delayed
  ARGV[1]      now, epoch ms
  ARGV[2]      wake channel
  ARGV[3]      heads index: this slot's number, or "" when the topic keeps none
  ARGV[4]      max_retries
  ARGV[5]      retry backoff before the first retry, ms (doubles each retry; 0 = immediate)
  ARGV[6]      retry backoff cap, ms
  ARGV[7..]    pairs: delivery id, error text

  Returns {retried, dead}; ids whose lease is gone are skipped.

  Flags: allow-oom, since it only moves messages already stored (back to pending or to
  the dead letters), so that consumers can drain a Redis that is out of memory.
]]
--- @include "pending"
--- @include "group_keys"
--- @include "heads"
--- @include "settle"

local now = tonumber(ARGV[1])
local clock = open_clock(KEYS[1], now)
local k = group_keys(2)
if ARGV[3] ~= "" then
  attach_heads(k, KEYS[11], KEYS[12], ARGV[3])
end
local counts = {retried = 0, dead = 0}
for i = 7, #ARGV, 2 do
  local outcome = fail(k, ARGV[i], ARGV[i + 1], now, clock,
    tonumber(ARGV[4]), tonumber(ARGV[5]), tonumber(ARGV[6]))
  if outcome then
    counts[outcome] = counts[outcome] + 1
  end
end
count_outcomes(k, counts)
finish(clock, ARGV[2])
return {counts.retried, counts.dead}
