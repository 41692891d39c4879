#!lua flags=allow-oom
--[[
  Sizes of one group in one slot by state, ready counted per priority. Promotes due delayed
  messages first (their place does not depend on when that happens) so that "delayed" means
  due in the future.

  KEYS[1..11]  the 11 group keys of includes/group_keys.lua
  KEYS[11]     with the trace on (ARGV[2]): the slot's trace log (includes/trace.lua)
  ARGV[1]      now, epoch ms
  ARGV[2]      the topic's trace as the client read it: "" when off (its promotions are
               recorded)

  Returns {delayed, in_flight, dead, next_due or -1, {priority, count, oldest_due_ms}...,
  counters as a flat field/value list}.

  Flags: allow-oom, since its promotion only moves messages already stored, and sizes
  must be readable when Redis is out of memory.
  Housekeeping: what it writes is redone if lost, so a client waiting for replicas does not
  wait after it (storage/scripts.py).
]]
--- @housekeeping
--- @include "scores"
--- @include "pending"
--- @include "group_keys"
--- @include "trace"

local now = tonumber(ARGV[1])
local k = group_keys(1)
attach_trace(k, open_trace(ARGV[2], KEYS[1 + GROUP_KEY_COUNT]))
promote_due(k.ready, k.delayed, now, 100000, k)
trace_save(k.trace)

local bands = {}
local from = "-inf"
while true do
  local head = rcall("ZRANGEBYSCORE", k.ready, from, "+inf", "WITHSCORES", "LIMIT", 0, 1)
  if #head == 0 then
    break
  end
  local score = tonumber(head[2])
  local p = ready_priority(score)
  local band_end = fmt(ready_score(p - 1, 0))
  bands[#bands + 1] = {p, rcall("ZCOUNT", k.ready, from, "(" .. band_end),
    math.min(stamp_due(ready_stamp(score)), now)}
  from = band_end
end

local head = rcall("ZRANGE", k.delayed, 0, 0, "WITHSCORES")
local next_due = head[2] and delayed_due(tonumber(head[2])) or -1
return {rcall("ZCARD", k.delayed), rcall("HLEN", k.inflight), rcall("HLEN", k.dead), next_due,
  bands, rcall("HGETALL", k.counters)}
