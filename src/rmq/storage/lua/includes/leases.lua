--[[
  Lease members (docs/storage.md, "Leases"). A claim gives each slot's share one lease: the
  member "first:last" covers the delivery ids first..last (a share of one is the bare id).
  Extending a delivery gives it a lease of its own, the bare id, which then decides for it
  whatever its range's lease says. A delivery is held exactly while its record exists.
  Settling deletes the record; an ack that settles a share whole also drops its lease (the
  client names the runs of ids it acks, ack.lua), and any other lease is dropped by recover
  once it expires. One lease per share instead of one written and one removed per message
  saves a seventh of claim(100)+ack's server instructions (docs/storage.md, "Leases").

  lease_member(first, last) is the member of a range; expired_deliveries(k, now, limit)
  removes leases expired by `now`, the longest expired first (then an earlier version's
  leases of one id each), whole leases covering at most
  `limit` ids (at least one lease), and returns the ids of the deliveries they held that are
  still in flight, in that order.

  id_texts(first, last) spells the ids first..last (a claim's share, a range recovered).

  Provides: lease_member, id_texts, expired_deliveries.  Needs: rcall, and the includes below.
]]
--- @include "scores"
--- @include "bulk"

local function lease_member(first, last)
  if first == last then
    return fmt(first)
  end
  return fmt(first) .. ":" .. fmt(last)
end

-- The text of every id from first to last: a prefix formatted once per hundred ids and a
-- two-digit suffix from this table (a string.format per id cost most of a recovery).
-- (filled on first use: a library's load may not touch `string`)
local DIGIT_PAIRS = nil

local function id_texts(first, last)
  if not DIGIT_PAIRS then
    DIGIT_PAIRS = {}
    for n = 0, 99 do
      DIGIT_PAIRS[n] = string.format("%02d", n)
    end
  end
  local texts = {}
  local id = first
  while id <= last do
    local hundreds = (id - id % 100) / 100
    local stop = math.min(last, hundreds * 100 + 99)
    if hundreds == 0 then
      for n = id, stop do
        texts[#texts + 1] = fmt(n)
      end
    else
      local prefix = fmt(hundreds)
      for n = id, stop do
        texts[#texts + 1] = prefix .. DIGIT_PAIRS[n % 100]
      end
    end
    id = stop + 1
  end
  return texts
end

local function expired_deliveries(k, now, limit)
  -- the longest expired first (leases score negative: scores.lua)
  local read = rcall("ZREVRANGEBYSCORE", k.leases, fmt(-LEASE_SHIFT), fmt(expired_from(now)),
    "LIMIT", 0, limit)
  -- and an earlier version's, a lease per id (scores.lua), if any are left
  local earlier = rcall("ZREVRANGEBYSCORE", k.leases, "+inf", fmt(earlier_expired_from(now)),
    "LIMIT", 0, limit)
  for _, lease in ipairs(earlier) do
    read[#read + 1] = lease
  end
  -- whole leases only (a lease removed must have every delivery it held recovered), as many
  -- as cover at most `limit` ids, at least one: a call's work stays bounded by deliveries
  local expired, ranges, covered = {}, {}, 0  -- ranges[n]: {first, last} of a range lease
  for _, lease in ipairs(read) do
    local first, last = string.match(lease, "^(%d+):(%d+)$")
    local range = first and {tonumber(first), tonumber(last)}
    local size = range and range[2] - range[1] + 1 or 1
    if #expired > 0 and covered + size > limit then
      break
    end
    expired[#expired + 1] = lease
    ranges[#expired] = range
    covered = covered + size
  end
  if #expired == 0 then
    return expired
  end
  bulk("ZREM", k.leases, expired)
  local ids, seen = {}, {}
  if rcall("EXISTS", k.inflight) == 0 then
    return ids  -- nothing in flight: the expired leases were all settled
  end
  -- A delivery's own lease and its range's can expire by one call: it is recovered in its
  -- own lease's place, which the ZREM above has already taken out of the zset.
  local own = {}
  for n, lease in ipairs(expired) do
    if not ranges[n] then
      own[lease] = true
    end
  end
  local function add(id)
    if not seen[id] then  -- a guard: each delivery is failed once whatever its leases say
      seen[id] = true
      ids[#ids + 1] = id
    end
  end
  for n, lease in ipairs(expired) do
    if not ranges[n] then
      add(lease)  -- a delivery's own lease (or a share of one)
    else
      local range = id_texts(ranges[n][1], ranges[n][2])
      -- still in flight, and not under a lease of its own (an extension)
      local records = bulk("HMGET", k.inflight, range)
      local held = {}
      for j, record in ipairs(records) do
        if record then
          held[#held + 1] = range[j]
        end
      end
      if #held > 0 then
        local leased = bulk("ZMSCORE", k.leases, held)
        for j, id in ipairs(held) do
          if not (leased[j] or own[id]) then
            add(id)
          end
        end
      end
    end
  end
  return ids
end
