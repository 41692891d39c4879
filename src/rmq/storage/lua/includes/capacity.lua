--[[
  Capacity given back to a limited group's waiting consumers: one token per unit freed on
  the group's wake list, where each waiter BLPOPs one, so one freed unit wakes one waiter
  (never a herd). Waiters register in the waiters zset (limit_reserve.lua) until their
  wait's deadline; the list never holds more tokens than there are waiters, so units freed
  while nobody waits wake nobody later.

  Provides: give_back.  Needs: rcall.
]]

local function give_back(waiters_key, wake_key, now, units)
  if units <= 0 then return end
  rcall("ZREMRANGEBYSCORE", waiters_key, "-inf", now)
  local wanted = rcall("ZCARD", waiters_key) - rcall("LLEN", wake_key)
  local tokens = {}
  for i = 1, math.min(units, wanted) do tokens[i] = "1" end
  if #tokens > 0 then rcall("LPUSH", wake_key, unpack(tokens)) end
end
