--[[
  Writing a slot's tracer (trace_record.lua) at the end of a script: each group's "sent"
  and "merged" lines, the record appended to the log, and, once the list is `trim_every`
  elements past the cap, the trimming by cap and retention.

  Provides: trace_save.  Needs: rcall, and the includes below.
]]
--- @include "records"
--- @include "bulk"
--- @include "trace_record"

-- Merges named by ready score a "merged" line holds at most: a line stays about as long as
-- a copied member (INLINE_MAX).
local REFS_PER_LINE = 16

-- Each group's messages sent new by this call: one line.
local function write_sent(tracer)
  for _, k in ipairs(tracer.sending) do
    local members = k.trace_sent
    add_line(tracer, "sent\t" .. k.group_name .. "\t=" .. int_text(#members)
      .. "\t\t\t\t\t\t", #members)
    for _, member in ipairs(members) do
      add_entry(tracer, member)
    end
  end
end

-- Each group's merges of this call: the ready scores merged into, REFS_PER_LINE a line
-- (a score twice: two merges), then the delayed messages merged into with their counts
-- ("" when each is 1).
local function write_merges(tracer)
  for _, k in ipairs(tracer.merging) do
    local merges = k.trace_merges
    local refs, n = merges.refs, merges.n
    for from = 1, n, REFS_PER_LINE do
      local to = math.min(from + REFS_PER_LINE - 1, n)
      add_line(tracer, "merged\t" .. k.group_name .. "\t~" .. int_text(to - from + 1)
        .. "\t\t\t\t" .. table.concat(refs, ",", from, to) .. "\t\t", to - from + 1)
    end
    local entries = merges.entries
    if #entries > 0 then
      local counts, texts, many = merges.counts, {}, false
      for j, entry in ipairs(entries) do
        local count = counts[entry]
        texts[j] = int_text(count)
        many = many or count > 1
      end
      add_line(tracer, "merged\t" .. k.group_name .. "\t=" .. int_text(#entries) .. "\t\t\t"
        .. (many and table.concat(texts, ",") or "") .. "\t\t\t", #entries)
      for _, entry in ipairs(entries) do
        add_entry(tracer, entry)  -- an entry names itself (trace_record.lua)
      end
    end
  end
end

-- The list down to its newest `cap` elements (the head may then start inside a record: the
-- reader skips to the first MARKER), then whole records older than the retention from the
-- head (a few a time: they were written in time order).
local function trim(tracer)
  local log = tracer.log
  rcall("LTRIM", log, -tracer.cap, -1)
  local cutoff = tracer.now - tracer.retention
  for _ = 1, 8 do
    local starts = rcall("LPOS", log, MARKER, "COUNT", 2)
    local first = starts[1]
    if not first then
      rcall("UNLINK", log)  -- nothing whole is left
      break
    end
    if tonumber(rcall("LINDEX", log, first + 1)) >= cutoff then
      if first > 0 then
        rcall("LTRIM", log, first, -1)
      end
      break
    end
    if not starts[2] then
      rcall("UNLINK", log)  -- its newest record is past the retention too
      break
    end
    rcall("LTRIM", log, starts[2], -1)
  end
end

-- Write what the tracer holds.
local function trace_save(tracer)
  if not tracer then
    return
  end
  if tracer.sending then
    write_sent(tracer)
  end
  if tracer.merging then
    write_merges(tracer)
  end
  if tracer.n == 0 then
    return
  end
  local pieces, length = tracer.pieces, 0
  for from = 1, tracer.np, BULK_PIECE do
    length = rcall("RPUSH", tracer.log, unpack(pieces, from,
      math.min(from + BULK_PIECE - 1, tracer.np)))
  end
  if length > tracer.cap + tracer.trim_every then
    trim(tracer)
  end
end
