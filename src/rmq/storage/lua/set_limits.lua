#!lua flags=allow-oom
--[[
  Change some of a group's fleet-wide limits, keeping the others as stored, in one step
  (storage/registry.py set_limits): two operators setting different limits at once, one a
  max_in_flight and one a rate, both keep theirs; neither reads the limits, then writes
  back a copy that misses the other's.

  KEYS[1]      limits: hash, group -> JSON of its GroupLimits (only limited groups)
  KEYS[2]      groups: set, the topic's bound group names
  ARGV[1]      the group
  ARGV[2]      max_in_flight: "keep" (as stored), "null" (removed), or its JSON
  ARGV[3]      rate: "keep", "null", or its JSON, [count, seconds]
  ARGV[4]      max_batches: "keep", "null", or its JSON
  ARGV[5]      the group a topic with no bound group delivers to ("default"): bound then

  Returns the group's limits now stored, as the JSON GroupLimits.to_json writes ("" for
  none: its entry is removed), or {"unbound"} when it would set a limit of a group that is
  not bound, {"corrupt"} when the stored limits are not RMQ's; these two write nothing.

  Flags: allow-oom: one small entry, so that an operator can still change the limits of an
  out-of-memory Redis (raise a max_in_flight to drain it faster, remove a rate).
]]
local group = ARGV[1]
local given = {ARGV[2], ARGV[3], ARGV[4]}
local sets = false
for _, value in ipairs(given) do
  if value ~= "keep" and value ~= "null" then
    sets = true
  end
end
if sets and rcall("SISMEMBER", KEYS[2], group) == 0
    and not (group == ARGV[5] and rcall("EXISTS", KEYS[2]) == 0) then
  return {"unbound"}
end

-- a kept value written back exactly as Python reads it (17 digits round-trip a double)
local function encode(value)
  if value == nil or value == cjson.null then
    return "null"
  elseif type(value) == "number" then
    return string.format("%.17g", value)
  elseif type(value) == "table" and #value == 2 and type(value[1]) == "number"
      and type(value[2]) == "number" then
    return "[" .. encode(value[1]) .. "," .. encode(value[2]) .. "]"
  end
  return nil
end

local stored = rcall("HGET", KEYS[1], group)
local current = {}
if stored then
  local ok, decoded = pcall(cjson.decode, stored)
  if not ok or type(decoded) ~= "table" then
    return {"corrupt"}
  end
  current = decoded
end
local fields = {"max_in_flight", "rate", "max_batches"}
local merged = {}
for i, name in ipairs(fields) do
  if given[i] == "keep" then
    merged[i] = encode(current[name])
    if merged[i] == nil then
      return {"corrupt"}
    end
  else
    merged[i] = given[i]
  end
end
if merged[1] == "null" and merged[2] == "null" and merged[3] == "null" then
  rcall("HDEL", KEYS[1], group)
  return ""
end
-- max_batches only when set: what clients before it read
local record = '{"max_in_flight":' .. merged[1] .. ',"rate":' .. merged[2]
  .. (merged[3] == "null" and "" or ',"max_batches":' .. merged[3]) .. "}"
rcall("HSET", KEYS[1], group, record)
return record
