#!lua flags=allow-oom
--[[
  Deliveries of one group in one slot failed: each goes back to pending after its retry
  backoff, or to the dead-letter queue when it has been delivered 1 + max_retries times.

  KEYS[1]      string  the slot's generation (includes/settle_call.lua)
  KEYS[2]      string  the slot clock
  KEYS[3..13]  the 11 group keys of includes/group_keys.lua
  KEYS[14]     with a heads index (ARGV[4]): the group's heads_ready (includes/heads.lua)
  KEYS[15]     with a heads index: the group's heads_delayed
  KEYS[n]      with the trace on (ARGV[5]): the slot's trace log (includes/trace.lua)
  ARGV[1]      the generation the deliveries were claimed under ("": unchecked)
  ARGV[2]      now, epoch ms
  ARGV[3]      wake channel
  ARGV[4]      heads index: this slot's number, or "" when the topic keeps none
  ARGV[5]      the topic's trace as the client read it: "" when off
  ARGV[6]      "1" if the topic merges by key, else "" (includes/settle_call.lua)
  ARGV[7]      max_retries
  ARGV[8]      retry backoff before the first retry, ms (doubles each retry; 0 = immediate)
  ARGV[9]      retry backoff cap, ms
  ARGV[10..]   pairs: delivery id, error text

  Returns {retried, dead, superseded, cancelled}: a delivery told to stop
  (includes/running.lua) is dropped, not retried; ids whose lease is gone are skipped, and
  so is every id when the topic was deleted (or deleted and created again) since they
  were claimed: {0, 0, 0, 0}.

  Flags: allow-oom, since it only moves messages already stored (back to pending or to
  the dead letters), so that consumers can drain a Redis that is out of memory.
]]
--- @include "pending"
--- @include "settle_call"
--- @include "settle"

if settle_gone() then
  return {0, 0, 0, 0}
end
local k, now = open_slot()
local clock = open_clock(KEYS[2], now)
local counts = {retried = 0, dead = 0, superseded = 0, cancelled = 0}
for i = SLOT_ARGS + 4, #ARGV, 2 do
  local outcome = fail(k, ARGV[i], ARGV[i + 1], now, clock,
    tonumber(ARGV[7]), tonumber(ARGV[8]), tonumber(ARGV[9]), "failed")
  if outcome then
    counts[outcome] = counts[outcome] + 1
  end
end
count_outcomes(k, counts)
trace_save(k.trace)
finish(clock, ARGV[3])
return {counts.retried, counts.dead, counts.superseded, counts.cancelled}
