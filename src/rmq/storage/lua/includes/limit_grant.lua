--[[
  How many units of capacity a limited group's claim may take now, by its limits as the
  registry stores them (docs/limits.md): limit_reserve.lua grants them ahead of a cluster's
  claim, limit_claim.lua inside a single node's claim script.

  limit_grant(limits, permits_key, rate_key, wanted, now, clock): `limits` the group's
  decoded GroupLimits JSON, `now` the claim's epoch ms (its leases start from it), `clock`
  Redis's TIME in ms (what the rate log counts by). Returns the units granted (at most
  `wanted`) and, when fewer than wanted, the epoch ms (the claim's clock) at which more may
  be granted without any settle (the earliest permit deadline, or the rate's next free
  unit), -1 if none is known. Permits past their deadline are dropped first: a lease that
  expired has given its capacity back. The permits zset holds one more member, scored
  +inf, which is no permit (PERMITS_SKIPLIST below).

  limit_waiter(waiters_key, waiter, granted, now, wake_at, wait_ms): granted nothing, the
  claimer is registered as waiting for a token (capacity.lua) until its wait ends (at most
  `wait_ms`, or until wake_at); granted some, it waits for none (it goes on to handle them).

  Provides: limit_grant, limit_waiter.  Needs: rcall, cjson.
]]

-- A member longer than zset-max-listpack-value (64 bytes by default), never removed, keeps
-- the permits in Redis's skiplist encoding: in a listpack every insert and removal scans
-- the whole zset, which made a claim's 100 permits cost 1.7 us a delivery instead of 0.4.
local PERMITS_SKIPLIST = "rmq: this member keeps the permits zset a skiplist, being longer"
  .. " than zset-max-listpack-value"

local function limit_grant(limits, permits_key, rate_key, wanted, now, clock)
  local granted, wake_at = wanted, -1
  local function sooner(at)
    if wake_at < 0 or at < wake_at then wake_at = at end
  end

  local max_in_flight = limits.max_in_flight
  if max_in_flight ~= cjson.null then
    rcall("ZADD", permits_key, "NX", "+inf", PERMITS_SKIPLIST)
    rcall("ZREMRANGEBYSCORE", permits_key, "-inf", now)
    local free = max_in_flight - (rcall("ZCARD", permits_key) - 1)
    if free < granted then
      granted = math.max(free, 0)
      local first = rcall("ZRANGE", permits_key, 0, 0, "WITHSCORES")
      if first[2] then sooner(tonumber(first[2])) end
    end
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
