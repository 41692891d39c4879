--[[
  Writing a slot's tracer (trace_record.lua) at the end of a script: each group's "sent"
  line, the merges counted by this call added to the tally, the record appended to the
  events list, and, once the list is `trim_every` elements past the cap, the trimming by cap
  and retention.

  A group's tally hash, per message with merges not yet recorded (entry_of): first ms,
  last ms (13 digits each) and the count; "\0~" a value longer than hash-max-listpack-value,
  which keeps the hash in Redis's hashtable encoding (a listpack finds a field by scanning
  the whole hash: a merge cost 60 k instructions where the tally held 500 fields); "\0s"
  the cursor of the sweep below (no member is "\0~" or "\0s": see trace_record.lua). The claim that takes the message records them on
  its "claimed" line (trace.lua), so the tally holds pending messages only; the sweep drops
  what the retention has passed (the merges into the messages of a group deleted, say).

  Provides: trace_save.  Needs: rcall, and the includes below.
]]
--- @include "records"
--- @include "bulk"
--- @include "trace_record"

-- (a literal: a library's top level runs before the string library is there)
local TALLY_PIN = "~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~"
local SWEEP_COUNT = 10

-- Each group's messages sent new by this call: one line.
local function write_sent(tracer)
  for _, k in ipairs(tracer.sending) do
    local members = k.trace_sent
    add_line(tracer, "sent\t" .. k.group_name .. "\t=" .. int_text(#members)
      .. "\t\t\t\t\t\t\t", #members)
    for _, member in ipairs(members) do
      add_entry(tracer, member)
    end
  end
end

-- The merges counted by this call, added to each group's tally: first and last ms, and
-- the count.
local function save_merges(tracer)
  local now_text = tracer.now_text
  local once = now_text .. now_text .. "1"
  for _, k in ipairs(tracer.merging) do
    local fields, merges = k.trace_merged, k.trace_merges
    local held = bulk("HMGET", k.trace_tally, fields)
    local writes = {"\0~", TALLY_PIN}
    local w = 2
    for j, field in ipairs(fields) do
      local count, value = merges[field], held[j]
      if value then
        value = string.sub(value, 1, 13) .. now_text
          .. int_text(count + tonumber(string.sub(value, 27)))
      elseif count == 1 then
        value = once
      else
        value = now_text .. now_text .. int_text(count)
      end
      writes[w + 1], writes[w + 2] = field, value
      w = w + 2
    end
    bulk("HSET", k.trace_tally, writes)
  end
end

-- A step of the sweep of a tally: the merges of messages no claim took within the retention.
local function sweep_tally(tally, cutoff)
  local reply = rcall("HSCAN", tally, rcall("HGET", tally, "\0s") or "0", "COUNT", SWEEP_COUNT)
  local gone, found = {}, reply[2]
  for j = 1, #found, 2 do
    local field = found[j]
    if (string.byte(field, 1) ~= 0 or string.sub(field, 2, 2) == "#")
        and tonumber(string.sub(found[j + 1], 14, 26)) < cutoff then
      gone[#gone + 1] = field
    end
  end
  if #gone > 0 then
    bulk("HDEL", tally, gone)
  end
  rcall("HSET", tally, "\0s", reply[1])
end

-- The list down to its newest `cap` elements (the head may then start inside a record: the
-- reader skips to the first MARKER), then whole records older than the retention from the
-- head (a few a time: they were written in time order), then a step of the tally's sweep.
local function trim(tracer)
  local events = tracer.events
  rcall("LTRIM", events, -tracer.cap, -1)
  local cutoff = tracer.now - tracer.retention
  for _ = 1, 8 do
    local starts = rcall("LPOS", events, MARKER, "COUNT", 2)
    local first = starts[1]
    if not first then
      rcall("DEL", events)  -- nothing whole is left
      break
    end
    if tonumber(rcall("LINDEX", events, first + 1)) >= cutoff then
      if first > 0 then
        rcall("LTRIM", events, first, -1)
      end
      break
    end
    if not starts[2] then
      rcall("DEL", events)  -- its newest record is past the retention too
      break
    end
    rcall("LTRIM", events, starts[2], -1)
  end
  for _, tally in ipairs(tracer.tallies or {tracer.tally}) do
    sweep_tally(tally, cutoff)
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
    save_merges(tracer)
  end
  if tracer.n == 0 then
    return
  end
  local pieces, length = tracer.pieces, 0
  for from = 1, tracer.np, BULK_PIECE do
    length = rcall("RPUSH", tracer.events, unpack(pieces, from,
      math.min(from + BULK_PIECE - 1, tracer.np)))
  end
  if length > tracer.cap + tracer.trim_every then
    trim(tracer)
  end
end
