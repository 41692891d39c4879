#!lua flags=allow-oom
--[[
  Give claimed-but-unstarted deliveries back (a consumer shutting down): each returns to
  pending at its old place, and the delivery does not count as an attempt.

  KEYS[1]      string  the slot clock
  KEYS[2..10]  the 9 group keys of includes/group_keys.lua
  KEYS[11]     with a heads index (ARGV[3]): the group's heads_ready (includes/heads.lua)
  KEYS[12]     with a heads index: the group's heads_delayed
  ARGV[1]      now, epoch ms
  ARGV[2]      wake channel
  ARGV[3]      heads index: this slot's number, or "" when the topic keeps none
  ARGV[4..]    delivery ids

  Returns how many were given back.

  Flags: allow-oom, since it only moves messages already stored (back to pending), so
  that consumers shutting down can give them back on a Redis that is out of memory.
]]
--- @include "scores"
--- @include "pending"
--- @include "group_keys"
--- @include "heads"
--- @include "settle"

local now = tonumber(ARGV[1])
local clock = open_clock(KEYS[1], now)
local k = group_keys(2)
if ARGV[3] ~= "" then
  attach_heads(k, KEYS[11], KEYS[12], ARGV[3])
end
local released = 0
for i = 4, #ARGV do
  local p, a, due, member = take_inflight(k, ARGV[i])
  if p then
    requeue(k, member, p, a - 1, due, now, clock, due_stamp(due))
    released = released + 1
  end
end
finish(clock, ARGV[2])
return released
