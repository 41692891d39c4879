--[[
  A slot's tracer: the record one script call appends to the slot's trace, a list
  (docs/storage.md, "The trace"), and what names a message in it.

  A record is a run of the list's elements, appended by one RPUSH (no Lua string joins
  them: joining costs Lua more per byte than Redis takes to store them):
    MARKER          "\0@", where a record starts (a member cannot start so, below)
    "<time ms>"     Redis's time of the call
  then its lines, each nine fields joined by tabs: event, group, subject, delivery, attempt,
  count, scores, consumer, error. A subject "=<n>" says that the line's n messages follow
  it, an element each: the member as stored (docs/storage.md, "Members"), which the reader
  hashes into its message id, or "\0#" .. its message id when it is longer than INLINE_MAX
  (the SHA-1 costs Lua more than copying a short member). No member starts with "\0@" or
  "\0#": a member that starts with NUL goes on with a key length, and keys are at most
  64 KiB. A subject "~<n>" (merges, trace.lua) names n messages by their ready scores, in
  the scores field.

  open_trace(spec, log) makes a slot's tracer (nil when spec is "": the trace is off), its
  events timed by Redis's TIME (read once per call: a call of many slots has a tracer per
  slot). add_line(tracer, line, events) and add_entry(tracer, member) append to its record;
  entry_of(tracer, member) is what names the message there.

  Provides: open_trace, add_line, add_entry, entry_of.  Needs: rcall, CALL.
]]

-- Members up to this long are copied into the trace; a longer one is named by its message
-- id, a SHA-1 (about 1 us a 100 bytes), so a slot's trace holds about cap x INLINE_MAX bytes
-- at most.
local INLINE_MAX = 256
local MARKER = "\0@"

local function trace_now()
  if not CALL.trace_now then
    local time = rcall("TIME")
    CALL.trace_now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
    CALL.trace_now_text = string.format("%d", CALL.trace_now)
  end
  return CALL.trace_now, CALL.trace_now_text
end

-- spec: "<topic>:<retention ms>:<cap>" (storage/trace.py writes it), or "" when off
local function open_trace(spec, log)
  if spec == "" then
    return nil
  end
  local parsed = CALL.trace_spec  -- once per call: a call of many slots opens many
  if not parsed then
    -- topic names hold no ":", so plain finds split it, with no pattern to run
    local after_topic = string.find(spec, ":", 1, true)
    local after_retention = string.find(spec, ":", after_topic + 1, true)
    parsed = {string.sub(spec, 1, after_topic),
      tonumber(string.sub(spec, after_topic + 1, after_retention - 1)),
      tonumber(string.sub(spec, after_retention + 1))}
    CALL.trace_spec = parsed
  end
  local now, now_text = trace_now()
  local cap = parsed[3]
  return {log = log, topic = parsed[1], now = now,
    now_text = now_text, retention = parsed[2], cap = cap,
    trim_every = math.max(64, math.floor(cap / 16)), pieces = {MARKER, now_text}, np = 2,
    n = 0}  -- and, once used: sending and merging (trace.lua)
end

-- A line of `events` events (its entries, if any, follow it).
local function add_line(tracer, line, events)
  local np = tracer.np + 1
  tracer.pieces[np] = line
  tracer.np = np
  tracer.n = tracer.n + events
end

-- "\0#" .. the message id of a member longer than INLINE_MAX.
local function long_entry(tracer, member)
  return "\0#" .. string.sub(redis.sha1hex(tracer.topic .. member), 1, 16)
end

-- What names a message in a record: the member, or its long entry.
local function entry_of(tracer, member)
  return #member <= INLINE_MAX and member or long_entry(tracer, member)
end

local function add_entry(tracer, member)
  local np = tracer.np + 1
  tracer.pieces[np] = entry_of(tracer, member)
  tracer.np = np
end
