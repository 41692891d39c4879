#!lua flags=allow-oom
--[[
  Return deliveries of one group in one slot whose lease expired to pending, counting the
  attempt (the consumer died, froze or lost its connection): the same path as a failure,
  with the error "lease expired".

  KEYS[1]      string  the slot's generation (includes/settle_call.lua)
  KEYS[2]      string  the slot clock
  KEYS[3..13]  the 11 group keys of includes/group_keys.lua
  KEYS[14]     with a heads index (ARGV[4]): the group's heads_ready (includes/heads.lua)
  KEYS[15]     with a heads index: the group's heads_delayed
  KEYS[n]      with the trace on (ARGV[5]): the slot's trace log (includes/trace.lua)
  ARGV[1]      the topic's generation as the client read it from the registry ("": none)
  ARGV[2]      now, epoch ms
  ARGV[3]      wake channel
  ARGV[4]      heads index: this slot's number, or "" when the topic keeps none
  ARGV[5]      the topic's trace as the client read it: "" when off (each recovered
               delivery is traced as "expired")
  ARGV[6]      "1" if the topic merges by key, else "" (includes/settle_call.lua)
  ARGV[7]      max_retries
  ARGV[8]      retry backoff before the first retry, ms
  ARGV[9]      retry backoff cap, ms
  ARGV[10]     at most this many deliveries' leases per call (whole leases, at least one:
               a lease covers a claim's share of the slot)

  Returns {retried, dead} (a delivery told to stop is dropped: includes/running.lua); or,
  touching nothing, the integer GONE_UNKNOWN or GONE_STALE when
  the topic is gone (the client read its settings before it was deleted).

  Flags: allow-oom, since it only moves messages already stored (back to pending or to
  the dead letters), so that consumers can drain a Redis that is out of memory.
]]
--- @include "scores"
--- @include "pending"
--- @include "settle_call"
--- @include "settle"
--- @include "leases"

local gone = settle_gone()
if gone then
  return gone
end
local k, now = open_slot()
local expired = expired_deliveries(k, now, tonumber(ARGV[10]))
if #expired == 0 then
  return {0, 0}
end
local clock = open_clock(KEYS[2], now)
local counts = {retried = 0, dead = 0, superseded = 0, cancelled = 0}
for _, id in ipairs(expired) do
  local outcome = fail(k, id, "lease expired", now, clock,
    tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]), "expired")
  if outcome then  -- nil: a lease of its own outlived its record (settled already)
    counts[outcome] = counts[outcome] + 1
  end
end
count_outcomes(k, counts)
trace_save(k.trace)
finish(clock, ARGV[3])
return {counts.retried, counts.dead}
