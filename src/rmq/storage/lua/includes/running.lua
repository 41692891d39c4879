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
  or, superseded, while the identity is pending, until its next claim: a settle of the
  identity drops an entry past that (one left from before supersede was turned off), and
  a withdrawal of the pending identity drops an entry whose delivery has settled. A lost
  publish loses nothing: the newer message is pending in any case, and the mark decides at
  settling.

  note_claimed(k, identities, ids, known): a superseding group's claim writes each
  identity's entry (`known`: identity -> its entry as the claim read it, false where none,
  when it read every one). supersede(k, identity, limit, stopped): a send of `identity` into a superseding
  group marks its running delivery, unless its streak reached `limit`, counts it
  `superseded`, traces it and appends its id to `stopped`. stop_marks(k, ids): the marks of
  deliveries (false where none). forget_running(k, ids, members): settling these deliveries
  (their in-flight members) removes their marks, and their identities' entries of no more
  use: all but a superseded one's whose identity is pending (its streak), and one naming
  another delivery in flight. forget_withdrawn(k, identity): once the identity has left pending
  (a newer value the group's filter rejects), its entry goes too, unless the entry's
  delivery is in flight. publish_stops(channel, generation_key, group, slot, reason, ids)
  tells the consumers.

  Provides: entry_of, note_claimed, supersede, stop_marks, forget_running,
  forget_withdrawn, publish_stops, slot_number.
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

local function note_claimed(k, identities, ids, known)
  local fields = {}
  for j, identity in ipairs(identities) do
    fields[j] = "=" .. identity
  end
  local before = {}
  if known then  -- what the claim read already (take.lua's waits): false where none
    for j, identity in ipairs(identities) do
      before[j] = known[identity]
    end
  else
    before = bulk("HMGET", k.running, fields)
  end
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

-- Whether an identity's entry (`value`) is of no more use. It is of use while its delivery
-- is in flight (a send may supersede it) and, once superseded, while the identity is
-- pending (the identity's next claim carries the streak on); any other entry is left from a
-- pending message withdrawn since, or from before supersede was turned off. `settling`:
-- the ids settled now, in flight no more.
local function entry_spent(k, identity, value, settling)
  local id, _, superseded = entry_of(value)
  if not id then
    return true
  end
  if not settling[id] and rcall("HEXISTS", k.inflight, id) == 1 then
    return false
  end
  return not (superseded and (rcall("ZSCORE", k.ready, identity)
    or rcall("ZSCORE", k.delayed, identity)))
end

-- `members[j]`: the in-flight member of ids[j] (nil when it is no longer in flight). Its
-- entry is under its identity: the member itself (merging by body), or its key (merging by
-- key); both are looked up, and whichever entry is spent goes (entry_spent: an entry that
-- names the settled delivery and is not superseded, at no command more).
local function forget_running(k, ids, members)
  local marks, fields, settling = {}, {}, {}
  for j, id in ipairs(ids) do
    marks[#marks + 1] = "#" .. id
    settling[id] = true
    local member = members[j]
    if member then
      fields[#fields + 1] = "=" .. member
      local key = member_key(member)
      if key ~= member then
        fields[#fields + 1] = "=" .. key
      end
    end
  end
  bulk("HDEL", k.running, marks)
  if #fields == 0 then
    return
  end
  local entries = bulk("HMGET", k.running, fields)
  local gone = {}
  for j, value in ipairs(entries) do
    if value and entry_spent(k, string.sub(fields[j], 2), value, settling) then
      gone[#gone + 1] = fields[j]
    end
  end
  bulk("HDEL", k.running, gone)
end

-- Merging by key, `identity` withdrawn from pending (a newer value the group's filter
-- rejects): its entry goes unless its delivery is in flight (then its settle drops it,
-- since nothing of the identity is pending).
local function forget_withdrawn(k, identity)
  local field = "=" .. identity
  local value = rcall("HGET", k.running, field)
  if value and entry_spent(k, identity, value, {}) then
    rcall("HDEL", k.running, field)
  end
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
