#!lua
--[[
  Put dead letters of one group in one slot back to pending (ready now, attempts reset),
  merging with anything pending under the same member.

  KEYS[1]      string  the slot's generation (includes/settle_call.lua)
  KEYS[2]      string  the slot clock
  KEYS[3..13]  the 11 group keys of includes/group_keys.lua
  KEYS[14]     with a heads index (ARGV[4]): the group's heads_ready (includes/heads.lua)
  KEYS[15]     with a heads index: the group's heads_delayed
  KEYS[n]      with the trace on (ARGV[5]): the slot's trace log (includes/trace.lua)
  ARGV[1]      the topic's generation as the client read it from the registry ("": none)
  ARGV[2]      now, epoch ms
  ARGV[3]      wake channel
  ARGV[4]      heads index: this slot's number, or "" when the topic keeps none
  ARGV[5]      the topic's trace as the client read it: "" when off
  ARGV[6]      "1" if the topic merges by key, else "" (includes/settle_call.lua)
  ARGV[7..]    dead-letter ids; none means every dead letter of the slot

  Returns {requeued}: how many were requeued (a damaged record stays dead, uncounted); or, touching nothing, the integer
  GONE_UNKNOWN or GONE_STALE when the topic is gone (the client read its settings before
  it was deleted).

  No flags: without allow-oom, Redis refuses the whole script when it is out of memory,
  instead of failing at its first write and leaving half the dead letters requeued.
]]
--- @include "records"
--- @include "pending"
--- @include "settle_call"
--- @include "settle"

local gone = settle_gone()
if gone then
  return gone
end
local k, now = open_slot()
local clock = open_clock(KEYS[2], now)
local ids = argv_list(SLOT_ARGS + 1)
if #ids == 0 then
  ids = rcall("ZRANGE", k.dead_index, 0, -1)
end
local requeued = 0
for _, id in ipairs(ids) do
  local record = rcall("HGET", k.dead, id)
  -- a record that is no dead record (damaged) stays: nothing could be put back of it
  if record and string.match(record, "^%d+,%d+,%d+,%d+,%d+,") then
    local p, _, _, _, _, member = parse_dead(record)
    rcall("HDEL", k.dead, id)
    rcall("ZREM", k.dead_index, id)
    local name = put_back(k, member, p, now, now, clock, nil)  -- (attempts start again)
    if k.trace then
      trace_message(k, "requeued", name, id)
    end
    requeued = requeued + 1
  end
end
trace_save(k.trace)
finish(clock, ARGV[3])
return {requeued}
