#!lua flags=allow-oom
--[[
  After a limited group's claim: its placeholder permits become the claimed deliveries'
  permits (each with its lease deadline), its rate log entry counts what it took, its entry
  in the batches hash (a max_batches) names its deliveries (or goes, if it took none), and
  the units it reserved but did not take are given back to waiting consumers.

  KEYS[1]      permits: zset, delivery id (or placeholder "token:i") -> deadline, epoch ms
  KEYS[2]      rate log: zset, "token:count" -> Redis TIME of the claim, ms
  KEYS[3]      waiters: zset, waiter id -> deadline of its wait, epoch ms
  KEYS[4]      wake list: list of tokens, one per unit of capacity given back to a waiter
  KEYS[5]      batches: hash, a claim in flight -> its ids (includes/limit_grant.lua)
  ARGV[1]      now, epoch ms
  ARGV[2]      token of the claim
  ARGV[3]      units reserved
  ARGV[4]      lease deadline of the deliveries, epoch ms
  ARGV[5]      1 if the reservation holds placeholder permits, else 0
  ARGV[6..]    the claimed delivery ids

  Returns the units given back.

  Flags: allow-oom, as limit_reserve.lua.
]]
--- @include "bulk"
--- @include "capacity"

local reserved = tonumber(ARGV[3])
local taken = #ARGV - 5
if ARGV[5] == "1" then
  local placeholders = {}
  for i = 1, reserved do placeholders[i] = ARGV[2] .. ":" .. i end
  bulk("ZREM", KEYS[1], placeholders)
  local permits = {}
  for i = 6, #ARGV do
    permits[#permits + 1] = ARGV[4]
    permits[#permits + 1] = ARGV[i]
  end
  if taken > 0 then bulk("ZADD", KEYS[1], permits) end
  if rcall("HDEL", KEYS[5], ARGV[2]) == 1 and taken > 0 then
    rcall("HSET", KEYS[5], ARGV[6], table.concat(ARGV, " ", 6))
  end
end
local logged = ARGV[2] .. ":" .. reserved
local at = rcall("ZSCORE", KEYS[2], logged)
if at and taken < reserved then
  rcall("ZREM", KEYS[2], logged)
  if taken > 0 then rcall("ZADD", KEYS[2], at, ARGV[2] .. ":" .. taken) end
end
give_back(KEYS[3], KEYS[4], tonumber(ARGV[1]), reserved - taken)
return reserved - taken
