#!lua flags=allow-oom
--[[
  Extend the leases of deliveries still being handled: each gets a lease of its own (its
  bare id in the leases zset, includes/leases.lua), which decides for it from now on
  whatever the lease of its claim's range says.

  KEYS[1]      string  the slot's generation (includes/settle_call.lua)
  KEYS[2]      hash  the group's in-flight records in one slot
  KEYS[3]      zset  the group's leases in one slot
  KEYS[4]      list  with the trace on (ARGV[3]): the slot's trace log (includes/trace.lua)
  ARGV[1]      the generation the deliveries were claimed under ("": unchecked)
  ARGV[2]      new lease expiry, epoch ms
  ARGV[3]      the topic's trace as the client read it: "" when off
  ARGV[4..]    delivery ids

  Returns one integer per id: 1 if extended, 0 if the delivery was no longer in flight, or
  its topic was deleted (or deleted and created again) since it was claimed.

  Flags: allow-oom, so that consumers draining a Redis that is out of memory keep
  their leases.
]]
--- @include "scores"
--- @include "bulk"
--- @include "settle_call"
--- @include "trace"

local ids = argv_list(4)
local out = {}
if settle_gone() then
  for j = 1, #ids do
    out[j] = 0
  end
  return out
end
local until_ms = tonumber(ARGV[2])
local held = bulk("HMGET", KEYS[2], ids)
local moved = {}
for j, id in ipairs(ids) do
  out[j] = held[j] and 1 or 0
  if held[j] then
    moved[#moved + 1] = fmt(lease_score(until_ms, tonumber(id)))
    moved[#moved + 1] = id
  end
end
bulk("ZADD", KEYS[3], moved)
local k = {inflight = KEYS[2]}
attach_trace(k, open_trace(ARGV[3], KEYS[4]))
if k.trace then
  trace_present(k, "extended", ids, held)
  trace_save(k.trace)
end
return out
