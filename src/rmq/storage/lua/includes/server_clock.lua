--[[
  Redis's own clock, for the scripts that judge time by the server rather than by the `now`
  a client passes (the history's buckets, the heads index's resync interval).

  Provides: server_ms.  Needs: rcall.
]]
local function server_ms()
  local time = rcall("TIME")
  return tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
end
