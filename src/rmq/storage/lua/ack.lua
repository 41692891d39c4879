--[[
  Acknowledge deliveries of one group in one slot: the messages are done and gone.

  KEYS         the 9 group keys of includes/group_keys.lua
  ARGV[1]      wake channel
  ARGV[2..]    delivery ids

  Returns how many were acknowledged; an id whose lease is gone (already acknowledged, or
  expired and returned to pending) is not counted and changes nothing.
]]
--- @include "scores"
--- @include "member"
--- @include "records"
--- @include "pending"
--- @include "group_keys"
--- @include "settle"

local k = group_keys(1)
local acked = 0
local unlocked = false
for i = 2, #ARGV do
  local p, _, _, _, released = take_inflight(k, ARGV[i])
  if p then
    acked = acked + 1
    unlocked = unlocked or released
  end
end
if acked > 0 then
  rcall("HINCRBY", k.counters, "acked", acked)
end
-- On a serial topic, a released key can unblock ready messages a sleeping consumer skipped.
if unlocked and rcall("EXISTS", k.ready) == 1 then
  rcall("PUBLISH", ARGV[1], "1")
end
return acked
