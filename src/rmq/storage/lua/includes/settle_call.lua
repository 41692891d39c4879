--[[
  What the scripts that settle deliveries (ack, fail, release, extend, recover,
  requeue_dead) receive first, and check before touching anything:

  KEYS[1]  string  the generation of the (lowest) slot the call settles in
                   (includes/generation.lua)
  ARGV[1]  the generation the deliveries were claimed under (ack, fail, release, extend:
           the deliveries' own; recover, requeue_dead: the topic's as the client read it
           from the registry); "": unchecked, as for a topic created without one

  A delivery of a topic deleted since, or deleted and created again under its name, names
  delivery ids that the new topic hands out again from the same numbers: settle_gone says
  so, and the script settles nothing. One GET per call is enough on a single node too:
  delete_topic removes the slots' generations in slot order before any data, so a call
  that still sees its lowest slot's generation runs before any of that topic's data went.

  The one-slot scripts (fail, release, recover, requeue_dead) go on with:
  KEYS[2]      string  the slot clock
  KEYS[3..13]  the 11 group keys of includes/group_keys.lua
  KEYS[14]     with a heads index (ARGV[4]): the group's heads_ready (includes/heads.lua)
  KEYS[15]     with a heads index: the group's heads_delayed
  KEYS[n]      with the trace on (ARGV[5]): the slot's trace log (includes/trace.lua)
  ARGV[2]      now, epoch ms
  ARGV[3]      wake channel
  ARGV[4]      heads index: this slot's number, or "" when the topic keeps none
  ARGV[5]      the topic's trace as the client read it: "" when off
  ARGV[6]      "1" if the topic merges by key (includes/pending.lua), else ""
  and their own arguments from ARGV[SLOT_ARGS + 1].

  Provides: settle_gone, SLOT_ARGS, open_slot, groups_from, argv_list, counted_list.
  Needs: KEYS, ARGV, rcall, and the includes below.
]]
--- @include "generation"
--- @include "group_keys"
--- @include "heads"
--- @include "trace"

-- nil when the deliveries are the topic's as it is, else GONE_UNKNOWN or GONE_STALE.
local function settle_gone()
  return topic_gone(KEYS[1], ARGV[1])
end

local SLOT_ARGS = 6

-- A one-slot script's group keys (with the heads index when the topic keeps one, its
-- tracer when the trace is on, and by_key when the topic merges by key) and now.
local function open_slot()
  local k = group_keys(3)
  k.by_key = ARGV[6] == "1"
  if ARGV[4] ~= "" then
    attach_heads(k, KEYS[3 + GROUP_KEY_COUNT], KEYS[4 + GROUP_KEY_COUNT], ARGV[4])
  end
  attach_trace(k, open_trace(ARGV[5], KEYS[#KEYS]))
  return k, tonumber(ARGV[2])
end

-- The group key tables of KEYS[first..last] (last: #KEYS), one per slot (ack: a call
-- settles several slots), each followed by the slot's trace log when `trace` (the topic's
-- trace) is not "".
local function groups_from(first, last, trace)
  local slots = {}
  local stride = (trace or "") == "" and GROUP_KEY_COUNT or GROUP_KEY_COUNT + 1
  for at = first, last or #KEYS, stride do
    local k = group_keys(at)
    attach_trace(k, open_trace(trace or "", KEYS[at + GROUP_KEY_COUNT]))
    slots[#slots + 1] = k
  end
  return slots
end

-- ARGV[from..] as a list.
local function argv_list(from)
  local list = {}
  for i = from, #ARGV do
    list[#list + 1] = ARGV[i]
  end
  return list
end

-- The list at ARGV[at]: its length n, then its n items. Returns it and where the next starts.
local function counted_list(at)
  local n = tonumber(ARGV[at])
  local list = {}
  for i = at + 1, at + n do
    list[#list + 1] = ARGV[i]
  end
  return list, at + 1 + n
end
