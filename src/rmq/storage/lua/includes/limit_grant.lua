--[[
  How many units of capacity a limited group's claim may take now, by its limits as the
  registry stores them (docs/limits.md): limit_reserve.lua grants them ahead of a cluster's
  claim, limit_claim.lua inside a single node's claim script.

  limit_grant(limits, permits_key, rate_key, batches_key, wanted, now, clock): `limits`
  the group's decoded GroupLimits JSON, `now` the claim's epoch ms (its leases start from
  it), `clock` Redis's TIME in ms (what the rate log counts by). Returns the units granted
  (at most `wanted`) and, when fewer than wanted, the epoch ms (the claim's clock) at which
  more may be granted without any settle (the earliest permit deadline, or the rate's next
  free unit), -1 if none is known. Permits past their deadline are dropped first: a lease
  that expired has given its capacity back. The permits zset holds one more member, scored
  +inf, which is no permit (PERMITS_SKIPLIST below).

  Under a max_batches each claim in flight is a field of the batches hash, named by its
  first delivery id (or a cluster's reserve token) and holding its ids: "slot-seq" each,
  or "slot-first-last" for a run, or placeholders "token:i", space separated. A claim is
  in flight while one of its ids holds a permit (every delivery of such a group holds one,
  as under a max_in_flight); one found without is removed. A claim takes one unit, whatever
  its count: granted is all of `wanted` or nothing.
  limit_batch(batches_key, name, ids): records a claim that took ids.

  limit_waiter(waiters_key, waiter, granted, now, wake_at, wait_ms): granted nothing, the
  claimer is registered as waiting for a token (capacity.lua) until its wait ends (at most
  `wait_ms`, or until wake_at); granted some, it waits for none (it goes on to handle them).

  Provides: limit_grant, limit_waiter, limit_batch.  Needs: rcall, cjson.
]]

-- A member longer than zset-max-listpack-value (64 bytes by default), never removed, keeps
-- the permits in Redis's skiplist encoding: in a listpack every insert and removal scans
-- the whole zset, which made a claim's 100 permits cost 1.7 us a delivery instead of 0.4.
local PERMITS_SKIPLIST = "rmq: this member keeps the permits zset a skiplist, being longer"
  .. " than zset-max-listpack-value"

-- The ids of limit_batch's text, each run spelled out.
local function batch_ids(text)
  local ids = {}
  for token in string.gmatch(text, "%S+") do
    local slot, first, last = string.match(token, "^(%d+)-(%d+)-(%d+)$")
    if slot then
      for seq = tonumber(first), tonumber(last) do
        ids[#ids + 1] = slot .. "-" .. string.format("%d", seq)
      end
    else
      ids[#ids + 1] = token
    end
  end
  return ids
end

-- Whether a claim whose ids are `text` still holds a permit: its first id says so at once
-- for a claim in flight whole; the others are read only once that one is settled (or the
-- claim is over, and then once: it is removed).
local function batch_live(permits_key, text)
  local head = string.match(text, "^%S+")
  local slot, first = string.match(head, "^(%d+)-(%d+)-%d+$")
  if rcall("ZSCORE", permits_key, slot and (slot .. "-" .. first) or head) then
    return true
  end
  local ids = batch_ids(text)
  for from = 1, #ids, 1000 do  -- in pieces: unpack() fails near 8000 values
    local scores = rcall("ZMSCORE", permits_key, unpack(ids, from, math.min(from + 999, #ids)))
    for _, score in ipairs(scores) do
      if score then return true end
    end
  end
  return false
end

-- The claims of the group in flight (module doc), the ones over removed.
local function batches_in_flight(batches_key, permits_key)
  local entries = rcall("HGETALL", batches_key)
  local live, over = 0, {}
  for i = 1, #entries, 2 do
    if batch_live(permits_key, entries[i + 1]) then
      live = live + 1
    else
      over[#over + 1] = entries[i]
    end
  end
  if #over > 0 then rcall("HDEL", batches_key, unpack(over)) end
  return live
end

local function limit_batch(batches_key, name, ids)
  rcall("HSET", batches_key, name, ids)
end

local function limit_grant(limits, permits_key, rate_key, batches_key, wanted, now, clock)
  local granted, wake_at = wanted, -1
  local function sooner(at)
    if wake_at < 0 or at < wake_at then wake_at = at end
  end
  local function earliest_permit()
    local first = rcall("ZRANGE", permits_key, 0, 0, "WITHSCORES")
    if first[2] then sooner(tonumber(first[2])) end
  end

  local max_in_flight, max_batches = limits.max_in_flight, limits.max_batches
  local held = max_in_flight ~= cjson.null or (max_batches and max_batches ~= cjson.null)
  if held then
    rcall("ZADD", permits_key, "NX", "+inf", PERMITS_SKIPLIST)
    rcall("ZREMRANGEBYSCORE", permits_key, "-inf", now)
  end
  if max_in_flight ~= cjson.null then
    local free = max_in_flight - (rcall("ZCARD", permits_key) - 1)
    if free < granted then
      granted = math.max(free, 0)
      earliest_permit()
    end
  end
  if max_batches and max_batches ~= cjson.null and granted > 0
      and batches_in_flight(batches_key, permits_key) >= max_batches then
    granted = 0
    earliest_permit()
  end

  local rate = limits.rate
  if rate ~= cjson.null and granted > 0 then
    local window = math.ceil(rate[2] * 1000)
    rcall("ZREMRANGEBYSCORE", rate_key, "-inf", clock - window)
    local log = rcall("ZRANGE", rate_key, 0, -1, "WITHSCORES")
    local used = 0
    for i = 1, #log, 2 do
      used = used + tonumber(string.match(log[i], ":(%d+)$"))
    end
    local allowed = rate[1] - used
    if allowed < granted then
      granted = math.max(allowed, 0)
      -- The next unit is free once enough of the oldest claims leave the window.
      local short, freed = granted + 1 - allowed, 0
      for i = 1, #log, 2 do
        freed = freed + tonumber(string.match(log[i], ":(%d+)$"))
        if freed >= short then
          sooner(tonumber(log[i + 1]) + window + 1 - clock + now)
          break
        end
      end
    end
  end
  return granted, wake_at
end

local function limit_waiter(waiters_key, waiter, granted, now, wake_at, wait_ms)
  if granted == 0 then
    local until_ms = now + wait_ms
    if wake_at >= 0 and wake_at < until_ms then until_ms = wake_at end
    rcall("ZADD", waiters_key, until_ms + 1000, waiter)
  else
    rcall("ZREM", waiters_key, waiter)
  end
end
