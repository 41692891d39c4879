--[[
  Score encodings (docs/storage.md, "Scores"). Lua numbers are doubles, exact up to 2^53;
  every score here is an integer inside that range. Scores are written with %.17g because
  Redis converts a bare Lua number to text with only 14 significant digits.

  ready:   (255 - priority) * 2^46 - 2^53 + stamp,  stamp = (due_ms - EPOCH) * 32 + n
           -> highest priority first, then earliest stamp (send order) first.
  delayed: due_ms * 256 + (255 - priority)
           -> earliest due first.
]]
local EPOCH = 1704067200000     -- 2024-01-01T00:00:00Z; stamps count from here
local BAND = 70368744177664     -- 2^46: one priority's share of the ready score range
local OFFSET = 9007199254740992 -- 2^53: shifts ready scores into [-2^53, 2^53]
local SUB = 32                  -- stamps per millisecond before a slot's clock runs ahead

local function fmt(n)
  return string.format("%.17g", n)
end

local function ready_score(priority, stamp)
  return (255 - priority) * BAND - OFFSET + stamp
end

local function ready_priority(score)
  return 255 - math.floor((score + OFFSET) / BAND)
end

local function ready_stamp(score)
  local x = score + OFFSET
  return x - math.floor(x / BAND) * BAND
end

local function stamp_due(stamp)
  return EPOCH + math.floor(stamp / SUB)
end

local function due_stamp(due)
  return (due - EPOCH) * SUB
end

local function delayed_score(due, priority)
  return due * 256 + (255 - priority)
end

local function delayed_due(score)
  return math.floor(score / 256)
end

local function delayed_priority(score)
  return 255 - (score - math.floor(score / 256) * 256)
end
