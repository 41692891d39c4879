--[[
  The per-group keys of a slot arrive in KEYS in this fixed order (storage/keys.py builds
  them): ready, delayed, attempts, inflight, leases, locks, dead, dead_index, counters,
  values (a topic merging by key: identity -> the message as stored; pending.lua), running
  (deliveries told to stop, and a superseding group's index of what runs: running.lua).

  Provides: GROUP_KEY_COUNT, group_keys.  Needs: KEYS.
]]
local GROUP_KEY_COUNT = 11

local function group_keys(first)
  return {
    ready = KEYS[first], delayed = KEYS[first + 1], attempts = KEYS[first + 2],
    inflight = KEYS[first + 3], leases = KEYS[first + 4], locks = KEYS[first + 5],
    dead = KEYS[first + 6], dead_index = KEYS[first + 7], counters = KEYS[first + 8],
    values = KEYS[first + 9], running = KEYS[first + 10],
  }
end
