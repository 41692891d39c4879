--[[
  The trace of a topic's messages (docs/trace.md): every state change of a message in a
  group, recorded in the message's slot while the topic's `trace` setting is on.

  A script learns whether to trace from one argument, the topic's trace as the client read
  it from the registry: "" when off (nothing below runs: the script checks it once), else
  "<topic>:<retention ms>:<cap>" (storage/trace.py writes it), with the slot's two trace
  keys in KEYS:
    events  zset  one member per script call that recorded events in the slot, scored by
                  the slot's event count after it (what the cap trims by):
                  "<count>\t<time ms>" then per line "\n" and the line, ten fields
                  joined by tabs: event, group, message id, "d" .. delivery seq, attempt,
                  count, first and last ms (merged), consumer, error. A line of a claim
                  holds a share (message ids and attempts joined by commas, the share's
                  first delivery seq), one of an ack or extend its ids joined by commas.
    tally   hash  "#": the slot's event count; "<message id>|<group>" -> first ms (13
                  digits), last ms (13 digits), count: the merges into the message
                  pending in that group (or since pending), which the next send stored
                  anew turns into one "merged" event (the reader places it by its time)
  Events of a message as sent (sent, merged, promoted, claimed, requeued) carry its id;
  those of a delivery (extended, acked, failed, expired, released, dead, purged) carry its
  delivery seq alone, and the reader (storage/trace.py) finds them through the message's
  claimed events, which carry both. So a settle computes no message id and reads no record
  (an ack traces every id it names: the reader keeps a delivery's first ending only).
  Every TRIM_EVERY events (trace_save.lua) a write drops the calls beyond the cap and those
  older than the retention (from the oldest); the reader leaves out what is older still
  there.

  A message id is the first 16 hex digits of SHA-1("<topic>:" .. member), as
  rmq.message.message_id_of computes it.

  open_trace(spec, events, tally) makes a slot's tracer (nil when spec is ""), its events
  timed by Redis's TIME (read once per call); attach_trace(k, tracer) gives it to a group
  key table `k`, through which a group's events are recorded: trace_message(k, event,
  member, delivery), trace_merged(k, member), trace_delivery(k, event, id, error),
  trace_present(k, event, ids, present) (the ids whose `present` entry is set), and
  trace_taken(slots, out, o, consumer), a claim's messages from its reply (take.lua's
  take_chosen, written into `out` from `out[o]`). trace_save(tracer) writes a tracer's
  events at the end of the script.

  Provides: open_trace, attach_trace, trace_message, trace_merged, trace_delivery,
  trace_present, trace_taken, and trace_save (includes/trace_save.lua).  Needs: rcall,
  CALL, and the includes below.
]]
--- @include "scores"
--- @include "records"
--- @include "bulk"
--- @include "trace_save"

-- Redis's TIME in epoch ms, and its text, read once per call (a call of many slots has a
-- tracer per slot)
local function trace_now()
  if not CALL.trace_now then
    local time = rcall("TIME")
    CALL.trace_now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
    CALL.trace_now_text = fmt(CALL.trace_now)
  end
  return CALL.trace_now, CALL.trace_now_text
end

local function open_trace(spec, events, tally)
  if spec == "" then
    return nil
  end
  local topic, retention, cap = string.match(spec, "^(.*):(%d+):(%d+)$")
  local now, now_text = trace_now()
  return {events = events, tally = tally, topic = topic .. ":", now = now,
    now_text = now_text, retention = tonumber(retention), cap = tonumber(cap), lines = {},
    n = 0,
    merges = {}, merged_order = {}, sent = {}}
end

-- The group of a group key ("rmq:{t:s}:<group>:<kind>"): names hold no ":" or "}".
local function attach_trace(k, tracer)
  if tracer then
    k.trace = tracer
    k.group_name = string.match(k.inflight or k.ready or k.dead, "}:([^:]+):[^:]+$")
    k.trace_heads = {}
  end
end

-- "<event>\t<group>\t", made once per call and group
local function head(k, event)
  local text = k.trace_heads[event]
  if not text then
    text = event .. "\t" .. k.group_name .. "\t"
    k.trace_heads[event] = text
  end
  return text
end

local function message_id(tracer, member)
  return string.sub(redis.sha1hex(tracer.topic .. member), 1, 16)
end

-- A consumer or an error as a field: no tab or newline in it.
local function field_text(text)
  if text and string.find(text, "[\t\n]") then
    return (string.gsub(text, "[\t\n]", " "))
  end
  return text or ""
end

local function add(tracer, line)
  local lines = tracer.lines
  lines[#lines + 1] = line
  tracer.n = tracer.n + 1
end

-- An event of the message `member` as sent; `delivery`: the dead letter it came from
-- (requeued), or nil. A "sent" closes the merges counted since the message was last sent
-- new (trace_save turns them into their "merged" event).
local function trace_message(k, event, member, delivery)
  local tracer = k.trace
  local mid = message_id(tracer, member)
  add(tracer, head(k, event) .. mid .. "\t" .. (delivery and "d" .. delivery or "")
    .. "\t\t\t\t\t\t")
  if event == "sent" then
    local sent = tracer.sent
    sent[#sent + 1] = mid .. "|" .. k.group_name
  end
end

-- A send merged into the message pending in k's group: counted, written by trace_save.
local function trace_merged(k, member)
  local tracer = k.trace
  local field = message_id(tracer, member) .. "|" .. k.group_name
  local count = tracer.merges[field]
  if not count then
    tracer.merged_order[#tracer.merged_order + 1] = field
  end
  tracer.merges[field] = (count or 0) + 1
end

-- An event of the delivery `id` (its seq, as text); `err`: the error, if any.
local function trace_delivery(k, event, id, err)
  add(k.trace, head(k, event) .. "\td" .. id .. "\t\t\t\t\t\t" .. field_text(err))
end

-- An event of each of `ids` whose `present` entry is set (a record read, or a flag).
-- One line for all of them: their seqs joined by commas (ids as the script got them).
local function trace_present(k, event, ids, present)
  local listed = ids
  if present ~= ids then
    listed = {}
    for j, id in ipairs(ids) do
      if present[j] then
        listed[#listed + 1] = id
      end
    end
  end
  if #listed > 0 then
    local tracer = k.trace
    tracer.lines[#tracer.lines + 1] = head(k, event) .. "\td" .. table.concat(listed, ",")
      .. "\t\t\t\t\t\t"
    tracer.n = tracer.n + #listed
  end
end

-- Claimed messages of k's group, one line for a share: their message ids joined by
-- commas, the first delivery seq (the share's ids follow one another in member order) and
-- their attempts joined by commas.
local function trace_claimed(k, members, first, attempts, consumer)
  local tracer = k.trace
  local mids, tries = {}, {}
  for j, member in ipairs(members) do
    mids[j] = message_id(tracer, member)
    tries[j] = int_text(attempts[j])
  end
  tracer.lines[#tracer.lines + 1] = head(k, "claimed") .. table.concat(mids, ",") .. "\td"
    .. fmt(first) .. "\t" .. table.concat(tries, ",") .. "\t\t\t\t" .. field_text(consumer)
    .. "\t"
  tracer.n = tracer.n + #members
end

-- A claim's reply from out[o]: the number of shares, per share its slot index and first
-- delivery id, then runs (length, priority, attempts, due) of (slot index, member) pairs;
-- a slot's messages take its share's ids in the order they come (take.lua).
local function trace_taken(slots, out, o, consumer)
  local shares = out[o]
  local first, members, attempts = {}, {}, {}
  for s = 1, shares do
    local i = out[o + 2 * s - 1]
    first[i], members[i], attempts[i] = out[o + 2 * s], {}, {}
  end
  local at = o + 1 + 2 * shares
  while at <= #out do
    local n, tries = out[at], out[at + 2]
    for m = 1, n do
      local i = out[at + 2 + 2 * m]
      local list = members[i]
      list[#list + 1] = out[at + 3 + 2 * m]
      attempts[i][#list] = tries
    end
    at = at + 4 + 2 * n
  end
  for i, list in pairs(members) do
    trace_claimed(slots[i], list, first[i], attempts[i], consumer)
  end
end
