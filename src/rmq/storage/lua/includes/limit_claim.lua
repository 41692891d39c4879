--[[
  A single node's claim under its group's limits, inside the claim script (claim.lua,
  claim_heads.lua; docs/limits.md): one atomic call reads the limits, claims at most what
  they grant and gives each claimed delivery its permit, so it needs no placeholder and no
  second call. A group without limits costs one HGET.

  The client passes the group's 5 limit keys last in KEYS (limits hash, permits, rate log,
  waiters, batches: as limit_reserve.lua's KEYS[1..5]) with the claim's arguments limit_group,
  limit_waiter (who claims: registered as waiting when granted nothing) and limit_wait_ms
  (the longest it waits; includes/claim_args.lua reads the three); a cluster's call (one
  slot: the limit keys live on the topic's tag) passes limit_group "" and no limit keys,
  and limit_reserve.lua and limit_settle.lua do this instead.

  limit_key_count(group): how many of the last KEYS are limit keys (5, or 0 when `group`
  is "").
  limit_open(now, count, group, waiter, wait_ms): nil when no limit keys were passed
  (`group` ""); otherwise the claim's limit and the count it may take (all of `count` for a
  group without limits).
  limit_close(limit, taken, out, at, slot_of, lease_until): after take_chosen wrote `taken`
  into `out` with its shares from out[at] on (their number, then slot index and first
  delivery id each), the taken deliveries' permits (until lease_until), their entry in
  the rate log and, under a max_batches, the claim's entry in the batches hash
  (limit_grant.lua); appends to `out` what the client reads of the limit: 0 for a group
  without limits, else {granted, wake_at, permits}: granted and wake_at as
  limit_reserve.lua returns them, permits 1 if the group has a max_in_flight or a
  max_batches (its deliveries hold permits, which settling them frees), else 0.
  `slot_of(i)`: the slot number of slot index i.
  Returns `out`.

  Provides: limit_key_count, limit_open, limit_close.  Needs: KEYS, rcall, cjson,
  and the includes below.
]]
--- @include "bulk"
--- @include "scores"
--- @include "limit_grant"

-- ZADD's pairs for the permits of ids first..last of a slot: "slot-seq", a prefix made once
-- per hundred ids and a two-digit suffix from a table (id_texts, then a concatenation per
-- id, cost twice the time). Filled on first use: a library's load may not touch `string`.
local PERMIT_DIGITS = nil

local function add_permits(permits, n, deadline, slot, first, last)
  if not PERMIT_DIGITS then
    PERMIT_DIGITS = {}
    for d = 0, 99 do
      PERMIT_DIGITS[d] = string.format("%02d", d)
    end
  end
  local id = first
  while id <= last do
    local hundreds = (id - id % 100) / 100
    local stop = math.min(last, hundreds * 100 + 99)
    if hundreds == 0 then
      for seq = id, stop do
        permits[n + 1], permits[n + 2] = deadline, slot .. "-" .. fmt(seq)
        n = n + 2
      end
    else
      local prefix = slot .. "-" .. fmt(hundreds)
      for seq = id, stop do
        permits[n + 1], permits[n + 2] = deadline, prefix .. PERMIT_DIGITS[seq % 100]
        n = n + 2
      end
    end
    id = stop + 1
  end
  return n
end

local function limit_key_count(group)
  return group == "" and 0 or 5
end

local function limit_open(now, count, group, waiter, wait_ms)
  if group == "" then
    return nil, count
  end
  local n = #KEYS
  local limit = {permits = KEYS[n - 3], rate = KEYS[n - 2], batches = KEYS[n],
                 wake_at = -1, granted = count}
  local stored = rcall("HGET", KEYS[n - 4], group)
  if not stored then
    return limit, count
  end
  local limits = cjson.decode(stored)
  limit.limits, limit.clock = limits, 0
  if limits.rate ~= cjson.null then
    local time = rcall("TIME")
    limit.clock = tonumber(time[1]) * 1000 + math.floor(tonumber(time[2]) / 1000)
  end
  limit.granted, limit.wake_at = limit_grant(limits, limit.permits, limit.rate,
                                             limit.batches, count, now, limit.clock)
  limit_waiter(KEYS[n - 1], waiter, limit.granted, now, limit.wake_at, wait_ms)
  return limit, limit.granted
end

local function limit_close(limit, taken, out, at, slot_of, lease_until)
  if not limit then
    return out
  end
  local limits = limit.limits
  if not limits then
    out[#out + 1] = 0
    return out
  end
  local batched = limits.max_batches and limits.max_batches ~= cjson.null
  local held = limits.max_in_flight ~= cjson.null or batched
  if held and taken.n > 0 then
    local per_slot = {}
    for t = 1, taken.n do
      local i = taken.slot[t]
      per_slot[i] = (per_slot[i] or 0) + 1
    end
    local permits, n, deadline, runs = {}, 0, fmt(lease_until), {}
    for s = 1, out[at] do
      local i, first = out[at + 2 * s - 1], out[at + 2 * s]
      local last = first + per_slot[i] - 1
      n = add_permits(permits, n, deadline, slot_of(i), first, last)
      runs[s] = slot_of(i) .. "-" .. fmt(first) .. "-" .. fmt(last)
    end
    bulk("ZADD", limit.permits, permits)
    if batched then
      limit_batch(limit.batches, slot_of(out[at + 1]) .. "-" .. fmt(out[at + 2]),
                  table.concat(runs, " "))
    end
  end
  if limits.rate ~= cjson.null and taken.n > 0 then
    -- the claim's first delivery id names its entry: unique, as the token of a reserve is
    rcall("ZADD", limit.rate, limit.clock,
          slot_of(out[at + 1]) .. "-" .. out[at + 2] .. ":" .. taken.n)
  end
  out[#out + 1] = {limit.granted, limit.wake_at, held and 1 or 0}
  return out
end
