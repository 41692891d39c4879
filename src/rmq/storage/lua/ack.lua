#!lua flags=allow-oom,allow-cross-slot-keys
--[[
  Acknowledge deliveries of one group: the messages are done and gone. On a single node the
  client passes every slot it has acks for in one call; on a cluster, one slot per call.

  KEYS[1]      the generation of the lowest slot (includes/settle_call.lua)
  KEYS[2..]    per slot, the 11 group keys of includes/group_keys.lua (with the trace on,
               ARGV[3], then the slot's trace log: includes/trace.lua);
               then, on a single node for a group whose deliveries hold permits, its
               permits, waiters and wake keys (includes/ack_permits.lua)
  ARGV[1]      the generation the deliveries were claimed under ("": unchecked)
  ARGV[2]      wake channel
  ARGV[3]      the topic's trace as the client read it: "" when off
  ARGV[4..]    per slot, in KEYS order: n, then n delivery ids, then r, then r lease
               members "first:last" (or a bare id) of runs of consecutive ids among them
               (includes/leases.lua): each run's records are all deleted here, so a claim's
               share acknowledged whole drops its lease at once; then, with the permits'
               keys, now (epoch ms) and per slot its number (includes/ack_permits.lua)

  Returns how many were acknowledged; an id no longer in flight (already acknowledged, or
  its lease expired and it was recovered) is not counted and changes nothing, nor is any
  id of a topic deleted (or deleted and created again) since it was claimed: 0.

  Flags: allow-oom, since acknowledging frees memory, so that consumers can drain a
  Redis that is out of memory; allow-cross-slot-keys, since on a single node one call
  settles the group's deliveries of every slot (on a cluster, one call per slot).
]]
--- @include "settle_call"
--- @include "settle"
--- @include "ack_permits"

if settle_gone() then
  return 0
end

local acked_in_all = 0
local unlocked_any = false
local ready_left = false
local stride = ARGV[3] == "" and GROUP_KEY_COUNT or GROUP_KEY_COUNT + 1
local slots, held_keys = groups_from(2, #KEYS - ack_permit_keys(stride), ARGV[3]), {}
local acked_ids = {}  -- per slot, for the permits they hold
for _, k in ipairs(slots) do
  held_keys[#held_keys + 1] = k.locks
  held_keys[#held_keys + 1] = k.running
end
-- Only a serial topic has key locks, and only a group with deliveries told to stop or
-- with supersede on has `running` entries (includes/running.lua): one EXISTS over every
-- slot's says whether any slot must look (most topics: none, and no slot pays a call).
local held = rcall("EXISTS", unpack(held_keys)) > 0
local at = 4
for _, k in ipairs(slots) do
  local ids, whole
  ids, at = counted_list(at)
  whole, at = counted_list(at)
  acked_ids[#acked_ids + 1] = ids
  if k.trace then
    trace_present(k, "acked", ids, ids)
  end
  local acked, unlocked = take_inflight_many(k, ids, whole, held)
  if acked > 0 then
    rcall("HINCRBY", k.counters, "acked", acked)
  end
  acked_in_all = acked_in_all + acked
  if unlocked then
    unlocked_any = true
    ready_left = ready_left or rcall("EXISTS", k.ready) == 1
  end
  trace_save(k.trace)
end
if ack_permit_keys(stride) > 0 then
  release_permits(acked_ids, at)
end
-- On a serial topic, a released key can unblock ready messages a sleeping consumer skipped.
if unlocked_any and ready_left then
  rcall("PUBLISH", ARGV[2], "1")
end
return acked_in_all
