#!lua flags=allow-oom
--[[
  Cancel a message in one group and slot (SPEC §14): its pending message is removed, and
  each of its running deliveries is told to stop as a supersede tells it (marked in the
  group's `running`, published on the topic's stop channel: includes/running.lua), so that
  however it ends it is dropped, not retried. Both counted `cancelled`, and traced.

  KEYS[1]      string  the slot's generation (includes/settle_call.lua)
  KEYS[2]      string  the slot clock (unused: the one-slot scripts' layout)
  KEYS[3..13]  the 11 group keys of includes/group_keys.lua
  KEYS[14]     with a heads index (ARGV[4]): the group's heads_ready (includes/heads.lua)
  KEYS[15]     with a heads index: the group's heads_delayed
  KEYS[n]      with the trace on (ARGV[5]): the slot's trace log (includes/trace.lua)
  ARGV[1..6]   the one-slot scripts' arguments (includes/settle_call.lua): the topic's
               generation as the client read it, now, wake channel, heads slot, trace,
               by_key
  ARGV[7]      the topic's stop channel
  ARGV[8]      the message's name in pending (its identity merging by key, else the member),
               or "" when it is not pending here
  ARGV[9..]    the ids of its deliveries in flight here, as the client found them

  Returns {removed, told}: 1 if the pending message was removed (else 0), and how many of
  the deliveries were still in flight and not told to stop before; or the integer
  GONE_UNKNOWN or GONE_STALE, touching nothing, when the topic is gone.

  Flags: allow-oom, since it only removes and marks, so an operator can cancel work on a
  Redis that is out of memory.
]]
--- @include "pending"
--- @include "settle_call"
--- @include "running"

local gone = settle_gone()
if gone then
  return gone
end
local k = open_slot()
local name = ARGV[SLOT_ARGS + 2]
local removed = 0
if name ~= "" then
  local was_ready = rcall("ZREM", k.ready, name)
  local was_delayed = rcall("ZREM", k.delayed, name)
  if was_ready + was_delayed > 0 then
    removed = 1
    rcall("HDEL", k.attempts, name)
    if k.by_key then
      rcall("HDEL", k.values, name)
    end
    if k.trace then
      trace_message(k, "cancelled", name)
    end
  end
end
local told = {}
for i = SLOT_ARGS + 3, #ARGV do
  local id = ARGV[i]
  if rcall("HEXISTS", k.inflight, id) == 1
      and rcall("HSETNX", k.running, "#" .. id, "c") == 1 then
    told[#told + 1] = id
    if k.trace then
      trace_delivery(k, "cancelled", id, "")
    end
  end
end
if removed + #told > 0 then
  rcall("HINCRBY", k.counters, "cancelled", removed + #told)
end
publish_stops(ARGV[SLOT_ARGS + 1], KEYS[1], string.match(k.inflight, "}:([^:]+):"),
  slot_number(KEYS[1]), "cancelled", told)
trace_save(k.trace)
return {removed, #told}
