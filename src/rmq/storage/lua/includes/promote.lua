--[[
  Promotion of due delayed messages, on its own so that a script that reads a slot's head
  (head.lua, once per slot in every cluster claim) does not define all of pending.lua.

  Provides: promote_due.  Needs: rcall, and the includes below.
]]
--- @include "scores"
--- @include "trace"

-- Delayed messages whose time has come move to ready. Their stamp comes from their due time,
-- not from when this runs, so the order among ready messages does not depend on who promotes.
-- `k`, optional: the group's key table, whose tracer (trace.lua) records each promotion.
local function promote_due(ready, delayed, now, limit, k)
  local due = rcall("ZRANGEBYSCORE", delayed, "-inf", fmt(delayed_score(now, 0)),
    "WITHSCORES", "LIMIT", 0, limit)
  local traced = k and k.trace
  for i = 1, #due, 2 do
    local score = tonumber(due[i + 1])
    rcall("ZREM", delayed, due[i])
    rcall("ZADD", ready,
      fmt(ready_score(delayed_priority(score), due_stamp(delayed_due(score)))), due[i])
    if traced then
      trace_message(k, "promoted", due[i])
    end
  end
  return #due / 2
end
