--[[
  Writing a slot's tracer (includes/trace.lua) at the end of a script: the merges whose
  messages were sent anew closed into their "merged" events, the merges counted by this call
  added to the tally, the events written as one member of the events zset, and the trimming
  by cap and retention every TRIM_EVERY events. docs/trace.md and trace.lua's header
  describe the keys.

  Provides: trace_save.  Needs: rcall, and the includes below.
]]
--- @include "scores"
--- @include "records"
--- @include "bulk"

-- The slot's events between two trims: what a trace may hold beyond its cap.
local TRIM_EVERY = 64

-- The merges counted before the messages of `sent` were sent anew: their "merged" events,
-- ahead of this call's (the reader places each after the "sent" before it).
local function close_merges(tracer)
  local fields = tracer.sent
  local tallies = bulk("HMGET", tracer.tally, fields)
  local done, lines = {}, {}
  for j, tally in ipairs(tallies) do
    if tally then
      local mid, group = string.match(fields[j], "^(%x+)|(.*)$")
      tracer.n = tracer.n + 1
      lines[#lines + 1] = "merged\t" .. group .. "\t" .. mid .. "\t\t\t"
        .. string.sub(tally, 27) .. "\t" .. string.sub(tally, 1, 13) .. "\t"
        .. string.sub(tally, 14, 26) .. "\t\t"
      done[#done + 1] = fields[j]
    end
  end
  if #done > 0 then
    bulk("HDEL", tracer.tally, done)
    for _, line in ipairs(tracer.lines) do
      lines[#lines + 1] = line
    end
    tracer.lines = lines
  end
end

-- The merges counted by this call, added to the tally: first and last ms, and the count.
local function save_merges(tracer)
  local fields = tracer.merged_order
  local held = bulk("HMGET", tracer.tally, fields)
  local writes = {}
  local now_text = tracer.now_text
  for j, field in ipairs(fields) do
    local count, first = tracer.merges[field], now_text
    if held[j] then
      count, first = count + tonumber(string.sub(held[j], 27)), string.sub(held[j], 1, 13)
    end
    writes[#writes + 1] = field
    writes[#writes + 1] = first .. now_text .. int_text(count)
  end
  bulk("HSET", tracer.tally, writes)
end

-- Write what the tracer holds: its events as one member, the merges counted, then the
-- trimming by cap and retention.
local function trace_save(tracer)
  if not tracer then
    return
  end
  if #tracer.sent > 0 then
    close_merges(tracer)
  end
  local lines, n = tracer.lines, tracer.n
  if #tracer.merged_order > 0 then
    save_merges(tracer)
  end
  if n == 0 then
    return
  end
  local count = rcall("HINCRBY", tracer.tally, "#", n)
  rcall("ZADD", tracer.events, count, count .. "\t" .. tracer.now_text .. "\n"
    .. table.concat(lines, "\n"))
  -- Trimming, once the slot's events cross a multiple of TRIM_EVERY: by cap, then the
  -- oldest calls past the retention (a few a time: they were written in time order).
  if math.floor(count / TRIM_EVERY) == math.floor((count - n) / TRIM_EVERY) then
    return
  end
  if count > tracer.cap then
    rcall("ZREMRANGEBYSCORE", tracer.events, "-inf", count - tracer.cap)
  end
  local cutoff = tracer.now - tracer.retention
  for _ = 1, 8 do
    local oldest = rcall("ZRANGE", tracer.events, 0, 0)[1]
    if not oldest or tonumber(string.match(oldest, "^%d+\t(%d+)")) >= cutoff then
      break
    end
    rcall("ZREMRANGEBYRANK", tracer.events, 0, 0)
  end
end
