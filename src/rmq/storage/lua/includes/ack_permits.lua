--[[
  A single node's ack of a group whose deliveries hold permits of its max_in_flight
  (docs/limits.md) frees them in the same call, as limit_free.lua does on a cluster: the
  client passes the group's permits, waiters and wake keys last in KEYS (3 keys beyond the
  slots' 11 each, or 12 with the trace's key: which is how the script tells), and after the
  slots' lists in ARGV the time now (epoch ms) and each slot's number, in KEYS order.

  ack_permit_keys(stride): how many of the last KEYS are limit keys (3, or 0), for slots
  of `stride` keys each (11, or 12 with the trace's key).
  release_permits(ids_per_slot, at): the permits of the deliveries named (per slot, in KEYS
  order, their ids within the slot) removed, ARGV[at] being the time now; one token per
  unit freed for a waiting consumer (capacity.lua). Returns how many held a permit.

  Provides: ack_permit_keys, release_permits.  Needs: KEYS, ARGV, rcall, and the includes
  below.
]]
--- @include "group_keys"
--- @include "capacity"

local function ack_permit_keys(stride)
  return (#KEYS - 1) % stride == 3 and 3 or 0
end

local function release_permits(ids_per_slot, at)
  local members = {}
  for s, ids in ipairs(ids_per_slot) do
    local prefix = ARGV[at + s] .. "-"
    for _, id in ipairs(ids) do
      members[#members + 1] = prefix .. id
    end
  end
  local n, freed = #KEYS, 0
  for from = 1, #members, 1000 do  -- in pieces: unpack() fails near 8000 values
    freed = freed + rcall("ZREM", KEYS[n - 2], unpack(members, from,
                                                        math.min(from + 999, #members)))
  end
  give_back(KEYS[n - 1], KEYS[n], tonumber(ARGV[at]), freed)
  return freed
end
