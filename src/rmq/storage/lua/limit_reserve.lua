#!lua flags=allow-oom
--[[
  Reserve capacity for one claim of a limited group, before it claims (docs/limits.md):
  the units granted are held by placeholder permits until limit_settle.lua turns them into
  the claimed deliveries' permits, and are counted at once in the rate log.

  KEYS[1]      limits: hash, group -> JSON of its GroupLimits (the registry's)
  KEYS[2]      permits: zset, delivery id (or placeholder "token:i") -> deadline, epoch ms
  KEYS[3]      rate log: zset, "token:count" -> Redis TIME of the claim, ms
  KEYS[4]      waiters: zset, waiter id -> deadline of its wait, epoch ms
  ARGV[1]      group
  ARGV[2]      units wanted
  ARGV[3]      now, epoch ms (the claim's, that its leases start from)
  ARGV[4]      placeholder deadline, epoch ms (the claim's lease deadline)
  ARGV[5]      token of this claim (unique)
  ARGV[6]      waiter id: who claims, registered as waiting when granted nothing
  ARGV[7]      the longest it waits when held back, ms

  Returns {granted, wake_at, held}: the units the claim may take; when fewer than wanted,
  the epoch ms (the claim's clock) at which more may be granted without any settle (the
  earliest permit deadline, or the rate's next free unit), -1 if none is known; and 1 if
  the granted units hold placeholder permits (a max_in_flight is set), else 0.

  Flags: allow-oom, so that a consumer can still drain an out-of-memory Redis (a permit
  costs a few bytes per message in flight).
]]
--- @include "bulk"

local stored = rcall("HGET", KEYS[1], ARGV[1])
local wanted = tonumber(ARGV[2])
if not stored then
  return {wanted, -1, 0}  -- the limit was removed since the client read the registry
end
local limits = cjson.decode(stored)
local now = tonumber(ARGV[3])
local granted, wake_at = wanted, -1

local function sooner(at)
  if wake_at < 0 or at < wake_at then wake_at = at end
end

local max_in_flight = limits.max_in_flight
if max_in_flight ~= cjson.null then
  -- A permit past its deadline mirrors a lease that expired: its capacity is back.
  rcall("ZREMRANGEBYSCORE", KEYS[2], "-inf", now)
  local free = max_in_flight - rcall("ZCARD", KEYS[2])
  if free < granted then
    granted = math.max(free, 0)
    local first = rcall("ZRANGE", KEYS[2], 0, 0, "WITHSCORES")
    if first[2] then sooner(tonumber(first[2])) end
  end
end

local rate = limits.rate
local time = rcall("TIME")
local clock = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
if rate ~= cjson.null and granted > 0 then
  local window = math.ceil(rate[2] * 1000)
  rcall("ZREMRANGEBYSCORE", KEYS[3], "-inf", clock - window)
  local log = rcall("ZRANGE", KEYS[3], 0, -1, "WITHSCORES")
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

if granted > 0 then
  if max_in_flight ~= cjson.null then
    local placeholders = {}
    for i = 1, granted do
      placeholders[#placeholders + 1] = ARGV[4]
      placeholders[#placeholders + 1] = ARGV[5] .. ":" .. i
    end
    bulk("ZADD", KEYS[2], placeholders)
  end
  if rate ~= cjson.null then
    rcall("ZADD", KEYS[3], clock, ARGV[5] .. ":" .. granted)
  end
end
-- Granted nothing, the claimer waits for a token (capacity.lua); otherwise it waits for
-- none (a claim granted some goes on to handle them).
if granted == 0 then
  local until_ms = now + tonumber(ARGV[7])
  if wake_at >= 0 and wake_at < until_ms then until_ms = wake_at end
  rcall("ZADD", KEYS[4], until_ms + 1000, ARGV[6])
else
  rcall("ZREM", KEYS[4], ARGV[6])
end
local held = (granted > 0 and max_in_flight ~= cjson.null) and 1 or 0
return {granted, wake_at, held}
