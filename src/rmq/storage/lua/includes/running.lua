--[[
  Deliveries told to stop (SPEC §14, docs/semantics.md "Supersede and cancel"): a send that
  supersedes a running delivery, or a cancel, marks it in its group's `running` hash (one
  per slot) and publishes its id on the topic's stop channel; whatever its handler does
  then, settling it drops the message (a newer one is pending, or it was cancelled) instead
  of retrying it. The hash holds:

    "#" .. delivery id  ->  "s" (superseded) or "c" (cancelled): a delivery told to stop
    "=" .. identity     ->  "<delivery id>:<streak>", then ":s" once that delivery is
                            superseded: in a group with supersede on, the identity's latest
                            delivery, and how many of its deliveries in a row were
                            superseded (a claim carries the streak on from a superseded
                            one; supersede_limit stops the streak there)

  A `#` field lives while its delivery is in flight; an `=` field while its delivery is,
  or, superseded, until the identity's next claim. A lost publish loses nothing: the newer
  message is pending in any case, and the mark decides at settling.

  note_claimed(k, identities, ids): a superseding group's claim writes each identity's
  entry. supersede(k, identity, limit, stopped): a send of `identity` into a superseding
  group marks its running delivery, unless its streak reached `limit`, counts it
  `superseded`, traces it and appends its id to `stopped`. stop_marks(k, ids): the marks of
  deliveries (false where none). forget_running(k, ids, members): settling these deliveries
  (their in-flight members) removes their marks, and the entries that name them, except a
  superseded one's (its streak). publish_stops(channel, generation_key, group, slot,
  reason, ids) tells the consumers.

  Provides: note_claimed, supersede, stop_marks, forget_running, publish_stops,
  slot_number.
  Needs: rcall, and the includes below.
]]
--- @include "scores"
--- @include "bulk"
--- @include "member"
--- @include "trace"

local function entry_of(value)
  if not value then
    return nil
  end
  local id, streak, mark = string.match(value, "^([^:]+):(%d+)(:?s?)$")
  return id, tonumber(streak), mark == ":s"
end

local function note_claimed(k, identities, ids)
  local fields = {}
  for j, identity in ipairs(identities) do
    fields[j] = "=" .. identity
  end
  local before = bulk("HMGET", k.running, fields)
  local entries = {}
  for j, field in ipairs(fields) do
    local _, streak, superseded = entry_of(before[j])
    entries[#entries + 1] = field
    entries[#entries + 1] = ids[j] .. ":" .. fmt(superseded and streak or 0)
  end
  bulk("HSET", k.running, entries)
end

local function supersede(k, identity, limit, stopped)
  local field = "=" .. identity
  local id, streak, superseded = entry_of(rcall("HGET", k.running, field))
  if not id or superseded or streak >= limit or rcall("HEXISTS", k.inflight, id) == 0 then
    return
  end
  rcall("HSET", k.running, field, id .. ":" .. fmt(streak + 1) .. ":s", "#" .. id, "s")
  rcall("HINCRBY", k.counters, "superseded", 1)
  if k.trace then
    trace_delivery(k, "superseded", id, "")
  end
  stopped[#stopped + 1] = id
end

local function stop_marks(k, ids)
  local fields = {}
  for j, id in ipairs(ids) do
    fields[j] = "#" .. id
  end
  return bulk("HMGET", k.running, fields)  -- (false where none)
end

-- `members[j]`: the in-flight member of ids[j] (nil when it is no longer in flight). Its
-- entry is under its identity: the member itself (merging by body), or its key (merging by
-- key); the entry's delivery id says which, so both are looked up.
local function forget_running(k, ids, members)
  local marks, fields, named = {}, {}, {}
  for j, id in ipairs(ids) do
    marks[#marks + 1] = "#" .. id
    local member = members[j]
    if member then
      fields[#fields + 1] = "=" .. member
      named[#fields] = id
      fields[#fields + 1] = "=" .. member_key(member)
      named[#fields] = id
    end
  end
  bulk("HDEL", k.running, marks)
  if #fields == 0 then
    return
  end
  local entries = bulk("HMGET", k.running, fields)
  local gone = {}
  for j, value in ipairs(entries) do
    local id, _, superseded = entry_of(value)
    if id == named[j] and not superseded then
      gone[#gone + 1] = fields[j]
    end
  end
  bulk("HDEL", k.running, gone)
end

-- The slot of a slot's key ("rmq:{<topic>:<slot>}:..."; a topic name holds no "}").
local function slot_number(key)
  return tonumber(string.match(key, ":(%d+)}"))
end

-- (the topic's generation tells a delivery of this topic from one of a topic deleted and
-- created again under its name, whose ids start over)
local function publish_stops(channel, generation_key, group, slot, reason, ids)
  if #ids > 0 then
    rcall("PUBLISH", channel, cjson.encode({generation = rcall("GET", generation_key) or "",
      group = group, slot = slot, reason = reason, ids = ids}))
  end
end
