#!lua
--[[
  Put dead letters of one group in one slot back to pending (ready now, attempts reset),
  merging with anything pending under the same member.

  KEYS[1]      string  the slot clock
  KEYS[2..10]  the 9 group keys of includes/group_keys.lua
  KEYS[11]     with a heads index (ARGV[3]): the group's heads_ready (includes/heads.lua)
  KEYS[12]     with a heads index: the group's heads_delayed
  ARGV[1]      now, epoch ms
  ARGV[2]      wake channel
  ARGV[3]      heads index: this slot's number, or "" when the topic keeps none
  ARGV[4..]    dead-letter ids; none means every dead letter of the slot

  Returns how many were requeued.

  No flags: without allow-oom, Redis refuses the whole script when it is out of memory,
  instead of failing at its first write and leaving half the dead letters requeued.
]]
--- @include "records"
--- @include "pending"
--- @include "group_keys"
--- @include "heads"

local now = tonumber(ARGV[1])
local clock = open_clock(KEYS[1], now)
local k = group_keys(2)
if ARGV[3] ~= "" then
  attach_heads(k, KEYS[11], KEYS[12], ARGV[3])
end
local ids = {}
for i = 4, #ARGV do
  ids[#ids + 1] = ARGV[i]
end
if #ids == 0 then
  ids = rcall("ZRANGE", k.dead_index, 0, -1)
end
local requeued = 0
for _, id in ipairs(ids) do
  local record = rcall("HGET", k.dead, id)
  if record then
    local p, _, _, _, _, member = parse_dead(record)
    rcall("HDEL", k.dead, id)
    rcall("ZREM", k.dead_index, id)
    put_pending(k, member, p, now, now, clock, nil)
    requeued = requeued + 1
  end
end
finish(clock, ARGV[2])
return requeued
