#!lua flags=allow-oom
--[[
  Give claimed-but-unstarted deliveries back (a consumer shutting down): each returns to
  pending at its old place, and the delivery does not count as an attempt.

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
  ARGV[7..]    delivery ids

  Returns how many were given back (a delivery told to stop is dropped instead:
  includes/running.lua): none when the topic was deleted (or deleted and created
  again) since they were claimed.

  Flags: allow-oom, since it only moves messages already stored (back to pending), so
  that consumers shutting down can give them back on a Redis that is out of memory.
]]
--- @include "scores"
--- @include "pending"
--- @include "settle_call"
--- @include "settle"

if settle_gone() then
  return 0
end
local k, now = open_slot()
local clock = open_clock(KEYS[2], now)
local released = 0
for _, id in ipairs(argv_list(SLOT_ARGS + 1)) do
  local p, a, due, member, unlocked, stop = take_inflight(k, id)
  if p then
    if k.trace then
      trace_delivery(k, "released", id)
    end
    if not stop then
      requeue(k, member, p, a - 1, due, now, clock, due_stamp(due))
    else  -- dropped: a newer one is pending, or it was cancelled; a freed key wakes sleepers
      CALL.woke = CALL.woke or unlocked
    end
    released = released + 1
  end
end
trace_save(k.trace)
finish(clock, ARGV[3])
return released
