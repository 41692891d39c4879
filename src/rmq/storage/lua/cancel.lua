#!lua flags=allow-oom
--[[
  Cancel a message in one group and slot (SPEC §14): its pending message is removed, and
  each of its running deliveries is told to stop as a supersede tells it (marked in the
  group's `running`, published on the topic's stop channel: includes/running.lua), so that
  however it ends it is dropped, not retried. Both counted `cancelled`, and traced.

  The client found the message by scanning, a few round trips before this call, and a claim
  (or a retry, a recovered lease) may have moved it since: its name is enough to remove it
  from pending wherever it went there, and where it left pending, or a delivery the client
  found is gone, this call looks through the slot's in-flight deliveries for the message's
  (an HSCAN of `inflight`; only then), so that no delivery of it runs on untold. Its
  identity's supersede entry goes too (once nothing of it is pending, the streak it keeps
  is of no use) unless it names a delivery in flight that this call did not reach.

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
  ARGV[8]      the message's name: its identity merging by key, else the member (as pending
               holds it)
  ARGV[9]      "p" if the client found it pending here, else ""
  ARGV[10..]   the ids of its deliveries in flight here, as the client found them

  Returns {removed, told}: 1 if the pending message was removed (else 0), and how many of
  its deliveries were in flight and not told to stop before; or the integer GONE_UNKNOWN or
  GONE_STALE, touching nothing, when the topic is gone. {0, 0}: nothing of it is pending or
  in flight here any more (it was acknowledged or dead-lettered meanwhile).

  Flags: allow-oom, since it only removes and marks, so an operator can cancel work on a
  Redis that is out of memory.
]]
--- @include "pending"
--- @include "settle_call"
--- @include "records"
--- @include "running"

local gone = settle_gone()
if gone then
  return gone
end
local k = open_slot()
local name = ARGV[SLOT_ARGS + 2]
local removed = 0
if rcall("ZREM", k.ready, name) + rcall("ZREM", k.delayed, name) > 0 then
  removed = 1
  rcall("HDEL", k.attempts, name)
  if k.by_key then
    rcall("HDEL", k.values, name)
  end
  if k.trace then
    trace_message(k, "cancelled", name)
  end
end

-- the deliveries to tell: those the client found still in flight, and where the message
-- moved since (it left pending, or a delivery found is gone), every one of it in flight
local ids, reached, moved = {}, {}, ARGV[SLOT_ARGS + 3] == "p" and removed == 0
for i = SLOT_ARGS + 4, #ARGV do
  if rcall("HEXISTS", k.inflight, ARGV[i]) == 1 then
    ids[#ids + 1] = ARGV[i]
    reached[ARGV[i]] = true
  else
    moved = true
  end
end
if moved then
  local cursor = "0"
  repeat
    local page = rcall("HSCAN", k.inflight, cursor, "COUNT", 1000)
    cursor = page[1]
    local found = page[2]
    for i = 1, #found, 2 do
      local id = found[i]
      local _, _, _, member = parse_inflight(found[i + 1])
      if not reached[id] and (k.by_key and member_key(member) or member) == name then
        ids[#ids + 1] = id
        reached[id] = true
      end
    end
  until cursor == "0"
end
local told = {}
for _, id in ipairs(ids) do
  if rcall("HSETNX", k.running, "#" .. id, "c") == 1 then
    told[#told + 1] = id
    if k.trace then
      trace_delivery(k, "cancelled", id, "")
    end
  end
end
local entry = "=" .. name
local named = entry_of(rcall("HGET", k.running, entry))
if named and (reached[named] or rcall("HEXISTS", k.inflight, named) == 0) then
  rcall("HDEL", k.running, entry)
end
if removed + #told > 0 then
  rcall("HINCRBY", k.counters, "cancelled", removed + #told)
end
publish_stops(ARGV[SLOT_ARGS + 1], KEYS[1], string.match(k.inflight, "}:([^:]+):"),
  slot_number(KEYS[1]), "cancelled", told)
trace_save(k.trace)
return {removed, #told}
