#!lua flags=allow-oom
--[[
  Delete dead letters of one group in one slot, each traced as purged: how a topic with the
  trace on purges (without it, storage/dead.py deletes them with plain commands).

  KEYS[1]      hash  the group's dead letters in the slot
  KEYS[2]      zset  their index by time of death
  KEYS[3]      list  the slot's trace log (includes/trace.lua)
  ARGV[1]      the topic's trace as the client read it (not "")
  ARGV[2..]    dead-letter ids (delivery seqs)

  Returns how many were deleted.

  Flags: allow-oom, since purging frees memory.
]]
--- @include "trace"

local k = {dead = KEYS[1], inflight = KEYS[1]}
attach_trace(k, open_trace(ARGV[1], KEYS[3]))
local purged = 0
for i = 2, #ARGV do
  local id = ARGV[i]
  local record = rcall("HGET", KEYS[1], id)
  if record then
    rcall("HDEL", KEYS[1], id)
    rcall("ZREM", KEYS[2], id)
    if k.trace then
      trace_delivery(k, "purged", id)
    end
    purged = purged + 1
  end
end
trace_save(k.trace)
return purged
