--[[
  The trace of a topic's messages (docs/trace.md): every state change of a message in a
  group, recorded in the message's slot while the topic's `trace` setting is on.

  A script learns whether to trace from one argument, the topic's trace as the client read
  it from the registry: "" when off (nothing below runs: the script checks it once), else
  "<topic>:<retention ms>:<cap>" (storage/trace.py writes it), with the slot's two trace
  keys in KEYS:
    events  zset  one member per event, scored by its time (epoch ms):
                  "<message id>|<order>|<time>|<event>|<group>|<delivery seq>|<attempt>|
                  <count>|<last>|<consumer length>|" .. consumer .. error
                  (storage/trace.py parses it; <order>: the slot's event counter, which
                  orders events of one millisecond)
    tally   hash  "#": the slot's event counter; "<message id>|<group>" ->
                  "<count>:<first ms>:<last ms>": the merges into the message pending in
                  that group, which become one "merged" event when it is claimed
  Every write drops the events older than the retention and the oldest beyond the cap, and
  sets both keys to expire after the retention, so a trace turned off ages out.

  A message id is the first 16 hex digits of SHA-1("<topic>:" .. member), as
  rmq.message.message_id_of computes it.

  open_trace(spec, events, tally) makes a slot's tracer (nil when spec is ""), its events
  timed by Redis's TIME (read once per call); the group
  key tables `k` a script opens are given it with attach_trace(k, tracer), and the events
  of a group are recorded through `k`: trace_event(k, event, member, delivery, attempt,
  consumer, error), trace_merged(k, member), trace_claimed(k, members, ids, attempts,
  consumer), trace_records(k, event, ids, records) (in-flight records as stored). A
  script writes what its tracers hold with trace_save(tracer) at its end.

  trace_taken(slots, out, o, consumer) records a claim's messages from its reply (take.lua's
  take_chosen, written into `out` from `out[o]`), each in its slot's group key table.

  Provides: open_trace, attach_trace, trace_event, trace_merged, trace_claimed,
  trace_records, trace_taken, trace_save.  Needs: rcall, CALL, and the includes below.
]]
--- @include "scores"
--- @include "records"
--- @include "bulk"

-- Redis's TIME in epoch ms, read once per call (a call of many slots has a tracer each)
local function trace_now()
  if not CALL.trace_now then
    local time = rcall("TIME")
    CALL.trace_now = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  end
  return CALL.trace_now
end

local function open_trace(spec, events, tally)
  if spec == "" then
    return nil
  end
  local topic, retention, cap = string.match(spec, "^(.*):(%d+):(%d+)$")
  return {events = events, tally = tally, topic = topic .. ":", now = trace_now(),
    retention = tonumber(retention), cap = tonumber(cap),
    mids = {}, rests = {}, times = {}, merges = {}, merged_order = {}}
end

-- The group of a group key ("rmq:{t:s}:<group>:<kind>"): names hold no ":" or "}".
local function attach_trace(k, tracer)
  if tracer then
    k.trace = tracer
    k.group_name = string.match(k.inflight or k.ready, "}:([^:]+):[^:]+$")
  end
end

local function message_id(tracer, member)
  return string.sub(redis.sha1hex(tracer.topic .. member), 1, 16)
end

local function add(tracer, mid, time, rest)
  local n = #tracer.mids + 1
  tracer.mids[n], tracer.times[n], tracer.rests[n] = mid, time, rest
end

local function event_rest(time, event, group, delivery, attempt, count, last, consumer, err)
  consumer = consumer or ""
  return "|" .. fmt(time) .. "|" .. event .. "|" .. group .. "|" .. (delivery or "") .. "|"
    .. (attempt or "") .. "|" .. (count or "") .. "|" .. (last or "") .. "|" .. #consumer
    .. "|" .. consumer .. (err or "")
end

local function trace_event(k, event, member, delivery, attempt, consumer, err)
  local tracer = k.trace
  local now = tracer.now
  add(tracer, message_id(tracer, member), now,
    event_rest(now, event, k.group_name, delivery, attempt, nil, nil, consumer, err))
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

-- Claimed messages of k's group: each one's merges so far become its "merged" event, then
-- its "claimed" event. members[j] got delivery ids[j] at attempts[j].
local function trace_claimed(k, members, ids, attempts, consumer)
  local tracer = k.trace
  local mids, fields = {}, {}
  for j, member in ipairs(members) do
    mids[j] = message_id(tracer, member)
    fields[j] = mids[j] .. "|" .. k.group_name
  end
  if #fields == 0 then
    return
  end
  local tallies = bulk("HMGET", tracer.tally, fields)
  local done = {}
  for j, tally in ipairs(tallies) do
    if tally then
      local count, first, last = string.match(tally, "^(%d+):(%d+):(%d+)$")
      add(tracer, mids[j], tonumber(first), event_rest(tonumber(first), "merged",
        k.group_name, nil, nil, count, last))
      done[#done + 1] = fields[j]
    end
  end
  if #done > 0 then
    bulk("HDEL", tracer.tally, done)
  end
  local now = tracer.now
  for j = 1, #members do
    add(tracer, mids[j], now, event_rest(now, "claimed", k.group_name, ids[j], attempts[j],
      nil, nil, consumer))
  end
end

-- Deliveries of k's group whose in-flight records (as stored, false when gone) are
-- `records`: an event for each one still in flight, with its attempt and holder (once for
-- an id named twice).
local function trace_records(k, event, ids, records)
  local seen = {}
  for j, record in ipairs(records) do
    if record and not seen[ids[j]] then
      seen[ids[j]] = true
      local _, attempts, _, member, holder = parse_inflight(record)
      trace_event(k, event, member, ids[j], attempts, holder)
    end
  end
end

-- A claim's reply from out[o]: the number of shares, per share its slot index and first
-- delivery id, then runs (length, priority, attempts, due) of (slot index, member) pairs;
-- a slot's messages take its share's ids in the order they come (take.lua).
local function trace_taken(slots, out, o, consumer)
  local shares = out[o]
  local next_id, members, ids, attempts = {}, {}, {}, {}
  for s = 1, shares do
    local i = out[o + 2 * s - 1]
    next_id[i], members[i], ids[i], attempts[i] = out[o + 2 * s], {}, {}, {}
  end
  local at = o + 1 + 2 * shares
  while at <= #out do
    local n, tries = out[at], out[at + 2]
    for m = 1, n do
      local i, member = out[at + 2 + 2 * m], out[at + 3 + 2 * m]
      local list = members[i]
      list[#list + 1] = member
      ids[i][#list] = next_id[i]
      attempts[i][#list] = tries
      next_id[i] = next_id[i] + 1
    end
    at = at + 4 + 2 * n
  end
  for i, list in pairs(members) do
    trace_claimed(slots[i], list, ids[i], attempts[i], consumer)
  end
end

-- Write what the tracer holds: the events (numbered by the slot's counter), the merges
-- counted, then the trimming by retention and cap.
local function trace_save(tracer)
  if not tracer then
    return
  end
  local now = tracer.now
  local fields = tracer.merged_order
  if #fields > 0 then
    local held = bulk("HMGET", tracer.tally, fields)
    local writes = {}
    for j, field in ipairs(fields) do
      local count, first = tracer.merges[field], now
      if held[j] then
        local c, f = string.match(held[j], "^(%d+):(%d+):")
        count, first = count + tonumber(c), tonumber(f)
      end
      writes[#writes + 1] = field
      writes[#writes + 1] = count .. ":" .. fmt(first) .. ":" .. fmt(now)
    end
    bulk("HSET", tracer.tally, writes)
  end
  local n = #tracer.mids
  if n > 0 then
    local first = rcall("HINCRBY", tracer.tally, "#", n) - n
    local args = {}
    for j = 1, n do
      args[2 * j - 1] = fmt(tracer.times[j])
      args[2 * j] = tracer.mids[j] .. "|" .. (first + j) .. tracer.rests[j]
    end
    bulk("ZADD", tracer.events, args)
  elseif #fields == 0 then
    return
  end
  rcall("ZREMRANGEBYSCORE", tracer.events, "-inf", "(" .. fmt(now - tracer.retention))
  rcall("ZREMRANGEBYRANK", tracer.events, 0, -tracer.cap - 1)
  rcall("PEXPIRE", tracer.events, tracer.retention)
  rcall("PEXPIRE", tracer.tally, tracer.retention)
end
