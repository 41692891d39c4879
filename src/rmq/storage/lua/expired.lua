#!lua flags=no-writes,allow-oom
--[[
  How many of one group's in-flight deliveries in one slot hold a lease that ran out by
  `now` and have not been recovered yet (recover.lua gives them back to pending): what
  stats count as expired. Reads only; the leases are read as recover reads them
  (includes/leases.lua): a delivery's own lease decides for it, else its share's.

  KEYS[1]      the group's inflight hash in this slot (includes/group_keys.lua)
  KEYS[2]      its leases zset
  ARGV[1]      now, epoch ms
  ARGV[2]      at most this many expired leases read (their deliveries all counted)

  Returns the count.

  Flags: no-writes, allow-oom: sizes must be readable when Redis is out of memory.
]]
--- @include "leases"

local now, limit = tonumber(ARGV[1]), tonumber(ARGV[2])
local inflight, leases = KEYS[1], KEYS[2]
if rcall("EXISTS", inflight) == 0 then
  return 0
end
local expired = rcall("ZREVRANGEBYSCORE", leases, fmt(-LEASE_SHIFT), fmt(expired_from(now)),
  "LIMIT", 0, limit)
-- an earlier version's leases, one per delivery
for _, lease in ipairs(rcall("ZREVRANGEBYSCORE", leases, "+inf", fmt(earlier_expired_from(now)),
    "LIMIT", 0, limit)) do
  expired[#expired + 1] = lease
end

local counted, count = {}, 0
local function held(ids)
  local records = bulk("HMGET", inflight, ids)
  local out = {}
  for j, record in ipairs(records) do
    if record and not counted[ids[j]] then
      out[#out + 1] = ids[j]
    end
  end
  return out
end
local own = {}
for _, lease in ipairs(expired) do
  if not string.find(lease, ":", 1, true) then
    own[lease] = true
  end
end
for _, lease in ipairs(expired) do
  local first, last = string.match(lease, "^(%d+):(%d+)$")
  if not first then
    for _, id in ipairs(held({lease})) do  -- its own lease, or a share of one
      counted[id] = true
      count = count + 1
    end
  else
    local ids = held(id_texts(tonumber(first), tonumber(last)))
    if #ids > 0 then
      -- a delivery extended since has a lease of its own, which decides for it
      local leased = bulk("ZMSCORE", leases, ids)
      for j, id in ipairs(ids) do
        if not leased[j] or own[id] then
          counted[id] = true
          count = count + 1
        end
      end
    end
  end
end
return count
