#!lua flags=allow-oom
--[[
  Reserve capacity for one claim of a limited group on a Redis Cluster, before it claims
  (docs/limits.md; a single node's claim script does the same itself, limit_claim.lua):
  the units granted are held by placeholder permits until limit_settle.lua turns them into
  the claimed deliveries' permits, and are counted at once in the rate log.

  KEYS[1]      limits: hash, group -> JSON of its GroupLimits (the registry's)
  KEYS[2]      permits: zset, delivery id (or placeholder "token:i") -> deadline, epoch ms
  KEYS[3]      rate log: zset, "token:count" -> Redis TIME of the claim, ms
  KEYS[4]      waiters: zset, waiter id -> deadline of its wait, epoch ms
  KEYS[5]      batches: hash, a claim in flight -> its ids (includes/limit_grant.lua)
  ARGV[1]      group
  ARGV[2]      units wanted
  ARGV[3]      now, epoch ms (the claim's, that its leases start from)
  ARGV[4]      placeholder deadline, epoch ms (the claim's lease deadline)
  ARGV[5]      token of this claim (unique)
  ARGV[6]      waiter id: who claims, registered as waiting when granted nothing
  ARGV[7]      the longest it waits when held back, ms

  Returns 0 when the group has no limits (the claim takes what it wants, and needs no
  settle), else {granted, wake_at, permits}: the units the claim may take; when fewer than
  wanted, the epoch ms (the claim's clock) at which more may be granted without any settle
  (the earliest permit deadline, or the rate's next free unit), -1 if none is known; and 1
  if the group has a max_in_flight or a max_batches (the granted units hold placeholder
  permits; under a max_batches the claim is in flight in the batches hash as its token,
  until limit_settle.lua names it by its deliveries), else 0.

  Flags: allow-oom, so that a consumer can still drain an out-of-memory Redis (a permit
  costs a few bytes per message in flight).
]]
--- @include "bulk"
--- @include "limit_grant"

local stored = rcall("HGET", KEYS[1], ARGV[1])
if not stored then
  return 0
end
local wanted = tonumber(ARGV[2])
local limits = cjson.decode(stored)
local now = tonumber(ARGV[3])
local time = rcall("TIME")
local clock = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
local granted, wake_at = limit_grant(limits, KEYS[2], KEYS[3], KEYS[5], wanted, now, clock)
local batched = limits.max_batches and limits.max_batches ~= cjson.null
local permits = (limits.max_in_flight ~= cjson.null or batched) and 1 or 0
if granted > 0 then
  if permits == 1 then
    local placeholders = {}
    for i = 1, granted do
      placeholders[#placeholders + 1] = ARGV[4]
      placeholders[#placeholders + 1] = ARGV[5] .. ":" .. i
    end
    bulk("ZADD", KEYS[2], placeholders)
    if batched then
      limit_batch(KEYS[5], ARGV[5], ARGV[5] .. ":1")
    end
  end
  if limits.rate ~= cjson.null then
    rcall("ZADD", KEYS[3], clock, ARGV[5] .. ":" .. granted)
  end
end
limit_waiter(KEYS[4], ARGV[6], granted, now, wake_at, tonumber(ARGV[7]))
return {granted, wake_at, permits}
