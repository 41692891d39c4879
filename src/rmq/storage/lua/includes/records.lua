--[[
  Records of messages that left the pending zsets, as text headers before the member:
    in flight:   "priority,attempts,due_ms," .. member
    dead letter: "priority,attempts,due_ms,dead_ms,error_len," .. error .. member
]]
local function inflight_record(priority, attempts, due, member)
  return string.format("%d,%d,%.17g,", priority, attempts, due) .. member
end

local function parse_inflight(record)
  local p, a, d, rest = string.match(record, "^(%d+),(%d+),(%d+),()")
  return tonumber(p), tonumber(a), tonumber(d), string.sub(record, rest)
end

local function dead_record(priority, attempts, due, dead_at, err, member)
  return string.format("%d,%d,%.17g,%.17g,%d,", priority, attempts, due, dead_at, #err)
    .. err .. member
end

local function parse_dead(record)
  local p, a, d, t, n, rest = string.match(record, "^(%d+),(%d+),(%d+),(%d+),(%d+),()")
  n = tonumber(n)
  return tonumber(p), tonumber(a), tonumber(d), tonumber(t),
    string.sub(record, rest, rest + n - 1), string.sub(record, rest + n)
end
