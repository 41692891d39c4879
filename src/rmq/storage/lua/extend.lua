#!lua flags=allow-oom,allow-cross-slot-keys
--[[
  Extend the leases of deliveries still being handled: each gets a lease of its own (its
  bare id in the leases zset, includes/leases.lua), which decides for it from now on
  whatever the lease of its claim's range says. On a single node, deliveries that hold
  permits of their group's max_in_flight (docs/limits.md) move their permits with their
  leases, in this one call: a delivery whose permit is gone (it expired, and a claim may have
  taken its unit since) is not extended, so no lease ever outlives the unit it holds.

  KEYS[1]      string  the slot's generation (includes/settle_call.lua)
  KEYS[2]      hash  the group's in-flight records in one slot
  KEYS[3]      zset  the group's leases in one slot
  KEYS[4]      hash  the group's running in one slot: deliveries told to stop
               (includes/running.lua)
  KEYS[5]      list  with the trace on (ARGV[3]): the slot's trace log (includes/trace.lua)
  KEYS[n]      zset  last, with permits checked here (ARGV[4]): the group's permits,
               "slot-id" -> deadline, epoch ms (includes/limit_grant.lua)
  ARGV[1]      the generation the deliveries were claimed under ("": unchecked)
  ARGV[2]      new lease expiry, epoch ms
  ARGV[3]      the topic's trace as the client read it: "" when off
  ARGV[4]      the slot's number when the deliveries hold permits checked here, else ""
  ARGV[5..]    delivery ids

  Returns one integer per id: 1 if extended, 0 if the delivery was no longer in flight, or
  no longer held its permit, or its topic was deleted (or deleted and created again) since
  it was claimed; 2 or 3 if extended and told to stop, superseded or cancelled (what a
  consumer that missed the stop channel's message learns this way).

  Flags: allow-oom, so that consumers draining a Redis that is out of memory keep
  their leases; allow-cross-slot-keys, since on a single node the permits live under the
  topic's tag, apart from the slot's keys.
]]
--- @include "scores"
--- @include "bulk"
--- @include "settle_call"
--- @include "trace"
--- @include "running"

local ids = argv_list(5)
local out = {}
if settle_gone() then
  for j = 1, #ids do
    out[j] = 0
  end
  return out
end
local until_ms = tonumber(ARGV[2])
local held = bulk("HMGET", KEYS[2], ids)
local permits, permit_ids = nil, {}
if ARGV[4] ~= "" then
  for j, id in ipairs(ids) do
    permit_ids[j] = ARGV[4] .. "-" .. id
  end
  permits = bulk("ZMSCORE", KEYS[#KEYS], permit_ids)
end
local moved, permits_moved, extended = {}, {}, {}
for j, id in ipairs(ids) do
  extended[j] = held[j] and (permits == nil or permits[j]) and true or false
  out[j] = extended[j] and 1 or 0
  if extended[j] then
    moved[#moved + 1] = fmt(lease_score(until_ms, tonumber(id)))
    moved[#moved + 1] = id
    if permits then
      permits_moved[#permits_moved + 1] = ARGV[2]
      permits_moved[#permits_moved + 1] = permit_ids[j]
    end
  end
end
bulk("ZADD", KEYS[3], moved)
if permits then
  bulk("ZADD", KEYS[#KEYS], permits_moved)
end
local k = {inflight = KEYS[2], running = KEYS[4]}
if rcall("EXISTS", k.running) == 1 then
  local marks = stop_marks(k, ids)
  for j = 1, #ids do
    if extended[j] and marks[j] then
      out[j] = marks[j] == "s" and 2 or 3
    end
  end
end
attach_trace(k, open_trace(ARGV[3], KEYS[5]))
if k.trace then
  trace_present(k, "extended", ids, extended)
  trace_save(k.trace)
end
return out
