--[[
  Ending an in-flight delivery.

  take_inflight removes the delivery's record and key lock, and returns the record's fields
  plus whether a key lock was released, and whether it was told to stop: "s" superseded,
  "c" cancelled, else nil (running.lua; the mark goes with it). It returns nil when the
  record is already gone (acknowledged, or expired and recovered), so a late ack or nack
  changes nothing. Leases
  stay: one covers a claim's whole share, and recover drops it once it expires (leases.lua);
  take_inflight_many drops the lease of a share it settles whole.

  Provides: take_inflight, take_inflight_many, put_back, requeue, fail, count_outcomes.
  Needs: rcall, and the includes below.
]]
--- @include "scores"
--- @include "member"
--- @include "records"
--- @include "bulk"
--- @include "pending"
--- @include "trace"
--- @include "running"

-- Whether the slot's group holds any delivery told to stop or any supersede entry: looked
-- up once per script call and group.
local function has_running(k)
  if k.has_running == nil then
    k.has_running = rcall("EXISTS", k.running) == 1
  end
  return k.has_running
end

local function take_inflight(k, id)
  local record = rcall("HGET", k.inflight, id)
  if not record then
    return nil
  end
  rcall("HDEL", k.inflight, id)
  local p, a, due, member = parse_inflight(record)
  local key = member_key(member)
  local released = rcall("HGET", k.locks, key) == id
  if released then
    rcall("HDEL", k.locks, key)
  end
  local stop = nil
  if has_running(k) then
    stop = stop_marks(k, {id})[1] or nil
    forget_running(k, {id}, {member})
    -- merging by key, a newer value of its identity may have waited for it (take.lua)
    released = released or k.by_key == true
  end
  return p, a, due, member, released, stop
end

-- take_inflight for a batch of acks, with a few commands for all of them: returns how many
-- were still in flight, and whether a key lock was released. Ids are never reused, so
-- deleting the record of every id is right for ids already settled too: it removes nothing.
-- `whole`: lease members of ranges every id of which is in `ids` (dropped now, not left to
-- recover). `held`: false when no slot of the call has key locks or a `running` entry
-- (one check for all: most topics have neither).
local function take_inflight_many(k, ids, whole, held)
  local released = false
  local locked = held and rcall("EXISTS", k.locks) == 1
  local records = nil
  if held and has_running(k) then
    -- deliveries told to stop, and a superseding group's entries: the records say whose
    records = bulk("HMGET", k.inflight, ids)
    local members = {}
    for j = 1, #ids do
      members[j] = records[j] and select(4, parse_inflight(records[j])) or nil
    end
    forget_running(k, ids, members)
    released = true  -- a newer value of an identity may have waited for one (take.lua)
  end
  -- a serial topic: free the keys these deliveries hold
  if locked then
    records = records or bulk("HMGET", k.inflight, ids)
    local keys, holders_of = {}, {}
    for j, record in ipairs(records) do
      if record then
        local _, _, _, member = parse_inflight(record)
        keys[#keys + 1] = member_key(member)
        holders_of[#keys] = ids[j]
      end
    end
    if #keys > 0 then
      local holders = bulk("HMGET", k.locks, keys)
      local free = {}
      for j, holder in ipairs(holders) do
        if holder == holders_of[j] then
          free[#free + 1] = keys[j]
        end
      end
      if #free > 0 then
        bulk("HDEL", k.locks, free)
        released = true
      end
    end
  end
  local acked = 0
  for from = 1, #ids, 1000 do  -- bulk() does not sum counts
    acked = acked + rcall("HDEL", k.inflight, unpack(ids, from, math.min(from + 999, #ids)))
  end
  -- the leases of claims' shares settled whole (ack.lua): none of their records is left
  bulk("ZREM", k.leases, whole)
  return acked, released
end

-- A delivered message back into pending (a retry, a release, a requeued dead letter): as
-- itself, or, when the topic merges by key (k.by_key), by its identity, keeping a value
-- pending there (sent since it was claimed: newer; pending.lua's put_value). Returns the
-- name it is pending under and whether it merged.
local function put_back(k, member, p, due, now, clock, stamp)
  if not k.by_key then
    return member, put_pending(k, member, p, due, now, clock, stamp)
  end
  local identity = member_key(member)
  local merged = put_pending(k, identity, p, due, now, clock, stamp)
  put_value(k, identity, member, merged, false)
  return identity, merged
end

-- Back to pending after `attempts` deliveries. A message that merges into one pending again
-- (sent anew while it was in flight) keeps the pending one's attempt count: that is new work.
-- Returns whether it merged, and the name it is pending under.
local function requeue(k, member, p, attempts, due, now, clock, stamp)
  local name, merged = put_back(k, member, p, due, now, clock, stamp)
  if not merged and attempts > 0 then
    rcall("HSET", k.attempts, name, attempts)
  end
  return merged, name
end

-- A failed delivery: retry after the backoff, or dead-letter it when the attempts are spent.
-- Returns "retried" or "dead", or "superseded" or "cancelled" for a delivery told to stop,
-- which is dropped. `event`: how the trace names the failure ("failed", or
-- "expired" for a lease that ran out).
local function fail(k, id, err, now, clock, max_retries, backoff, backoff_max, event)
  local p, a, due, member, unlocked, stop = take_inflight(k, id)
  if not p then
    return nil
  end
  if k.trace then
    trace_delivery(k, event, id, err)
  end
  if stop then
    -- told to stop: a newer message is pending (superseded), or it was cancelled; on a
    -- serial topic its key lock went with it, which frees the newer one for a sleeper
    CALL.woke = CALL.woke or unlocked
    return stop == "s" and "superseded" or "cancelled"
  end
  if a >= 1 + max_retries then
    rcall("HSET", k.dead, id, dead_record(p, a, due, now, err, member))
    rcall("ZADD", k.dead_index, fmt(now), id)
    if k.trace then
      trace_delivery(k, "dead", id, err)
    end
    return "dead"
  end
  local delay = 0
  if backoff > 0 then
    delay = math.min(backoff * 2 ^ (a - 1), backoff_max)
  end
  local merged, name = requeue(k, member, p, a, now + math.floor(delay), now, clock, nil)
  if unlocked and not merged then
    -- serial topic: the key stays held for this message until it runs again (key_locks.lua)
    rcall("HSET", k.locks, member_key(member), "r" .. name)
  end
  return "retried"
end

-- Add what fail() reported to the group's counters ({retried = n, dead = n, ...}; a
-- delivery told to stop was counted when it was told).
local function count_outcomes(k, counts)
  for name, n in pairs(counts) do
    if n > 0 and (name == "retried" or name == "dead") then
      rcall("HINCRBY", k.counters, name, n)
    end
  end
end
