--[[
  Records of messages that left the pending zsets, as text headers before the member:
    in flight:   "priority,attempts,due_ms," .. member                 (no holder known)
                 "priority,attempts,due_ms;holder_len," .. holder .. member  (claimed by holder)
    dead letter: "priority,attempts,due_ms,dead_ms,error_len," .. error .. member

  Provides: holder_part, inflight_header, parse_inflight, dead_record, parse_dead.  Needs:
  nothing.
]]
-- A claim writes one record per message, mostly with the same few numbers: their text is
-- kept, so a record costs one concatenation instead of a string.format (4x the time). In
-- the Functions library this table outlives the call (it lives as long as the library), so
-- it starts over once it holds NUMBER_TEXT_MAX numbers: due times alone never repeat.
local NUMBER_TEXT_MAX = 4096
local number_text, number_text_count = {}, 0

local function int_text(n)
  local text = number_text[n]
  if not text then
    if number_text_count >= NUMBER_TEXT_MAX then
      number_text, number_text_count = {}, 0
    end
    text = string.format("%d", n)
    number_text[n] = text
    number_text_count = number_text_count + 1
  end
  return text
end

-- holder_part: "," for no holder, or ";" .. #holder .. "," .. holder (the claim makes it once)
local function holder_part(holder)
  if holder == "" then
    return ","
  end
  return ";" .. #holder .. "," .. holder
end

-- The text before the member: a claim makes it once for a run of messages that share it.
local function inflight_header(priority, attempts, due, holder_text)
  return int_text(priority) .. "," .. int_text(attempts) .. "," .. int_text(due) .. holder_text
end

local function parse_inflight(record)
  local p, a, d, sep, rest = string.match(record, "^(%d+),(%d+),(%d+)([,;])()")
  if sep == ";" then
    local n, from = string.match(record, "^(%d+),()", rest)
    rest = from + tonumber(n)
  end
  return tonumber(p), tonumber(a), tonumber(d), string.sub(record, rest)
end

local function dead_record(priority, attempts, due, dead_at, err, member)
  return string.format("%d,%d,%d,%d,%d,", priority, attempts, due, dead_at, #err)
    .. err .. member
end

local function parse_dead(record)
  local p, a, d, t, n, rest = string.match(record, "^(%d+),(%d+),(%d+),(%d+),(%d+),()")
  n = tonumber(n)
  return tonumber(p), tonumber(a), tonumber(d), tonumber(t),
    string.sub(record, rest, rest + n - 1), string.sub(record, rest + n)
end
