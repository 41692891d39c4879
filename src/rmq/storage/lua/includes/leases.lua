--[[
  Lease members (docs/storage.md, "Leases"). A claim gives each slot's share one lease: the
  member "first:last" covers the delivery ids first..last (a share of one is the bare id).
  Extending a delivery gives it a lease of its own, the bare id, which then decides for it
  whatever its range's lease says. Settling a delivery deletes its record, not its lease: a
  delivery is held exactly while its record exists, and a lease whose deliveries are all
  settled is dropped by recover once it expires (one entry per claim instead of one written
  and one removed per message: a tenth of claim+ack's server instructions).

  lease_member(first, last) is the member of a range; expired_deliveries(k, now, limit)
  removes the leases expired by `now` (at most `limit`, the longest expired first) and
  returns the ids of the deliveries they held that are still in flight, in that order.

  Provides: lease_member, expired_deliveries.  Needs: rcall, and the includes below.
]]
--- @include "scores"
--- @include "bulk"

local function lease_member(first, last)
  if first == last then
    return fmt(first)
  end
  return fmt(first) .. ":" .. fmt(last)
end

local function expired_deliveries(k, now, limit)
  -- the longest expired first (leases score negative: scores.lua)
  local expired = rcall("ZREVRANGEBYSCORE", k.leases, "+inf", fmt(expired_from(now)),
    "LIMIT", 0, limit)
  if #expired == 0 then
    return expired
  end
  bulk("ZREM", k.leases, expired)
  local ids, seen = {}, {}
  local function add(id)
    if not seen[id] then  -- its own lease and its range's can expire in one call
      seen[id] = true
      ids[#ids + 1] = id
    end
  end
  for _, lease in ipairs(expired) do
    local first, last = string.match(lease, "^(%d+):(%d+)$")
    if not first then
      add(lease)  -- a delivery's own lease (or a share of one)
    else
      local range = {}
      for id = tonumber(first), tonumber(last) do
        range[#range + 1] = fmt(id)
      end
      -- still in flight, and not under a lease of its own (an extension)
      local records = bulk("HMGET", k.inflight, range)
      local held = {}
      for j, record in ipairs(records) do
        if record then
          held[#held + 1] = range[j]
        end
      end
      if #held > 0 then
        local own = bulk("ZMSCORE", k.leases, held)
        for j, id in ipairs(held) do
          if not own[j] then
            add(id)
          end
        end
      end
    end
  end
  return ids
end
