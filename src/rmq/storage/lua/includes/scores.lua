--[[
  Score encodings (docs/storage.md, "Scores"). Lua numbers are doubles, exact up to 2^53;
  every score here is an integer inside that range. Scores are written with "%d" (Lua
  5.1 formats it through a 64-bit long: exact for every integer double up to 2^53, and twice
  as fast as "%.17g") because Redis converts a bare Lua number to text with only 14
  significant digits.

  ready:   (127 - priority) * 2^46 + stamp,  stamp = (due_ms - EPOCH) * 32 + n, < 2^46
           -> highest priority first, then earliest stamp (send order) first. Decoding
           divides the score itself by 2^46: shifting it first would leave [-2^53, 2^53].
  delayed: due_ms * 256 + (255 - priority)
           -> earliest due first.
  delivery ids: a claim's first id in a slot is at least (now - EPOCH) * IDS_PER_MS + 1
           (first_id_floor), above every id handed out in an earlier millisecond, so a
           slot whose counter went back (a replica promoted without the last writes, an
           append-only file that lost its last second) never hands out an id again.
  leases:  -(lease_until_ms * 1024 + id % 1024) - 2^52, id the first of the lease's range
           (leases.lua; an earlier version wrote one lease per id, without the - 2^52)
           -> the newest lease first. A zset of up to 128 small members is a
           listpack, and a listpack insert scans from the head to its place: with the newest
           first, a claim inserts at the head instead of scanning every lease in flight
           (measured: a third of claim+ack's server instructions). The low bits make scores
           unique, so an insert never falls back to comparing members among equal scores.

  Provides: fmt, SUB, ready_score, ready_priority, ready_stamp, stamp_due, due_stamp,
  delayed_score, delayed_due, delayed_priority, first_id_floor, LEASE_SHIFT, lease_score,
  expired_from, earlier_expired_from.  Needs: nothing.
]]
local EPOCH = 1704067200000     -- 2024-01-01T00:00:00Z; stamps count from here
local BAND = 70368744177664     -- 2^46: one priority's share of the ready score range
local SUB = 32                  -- stamps per millisecond before a slot's clock runs ahead
local IDS_PER_MS = 1024         -- delivery ids per millisecond before a slot's ids run ahead

local function fmt(n)
  return string.format("%d", n)
end

local function ready_score(priority, stamp)
  return (127 - priority) * BAND + stamp
end

local function ready_priority(score)
  return 127 - (score - score % BAND) / BAND
end

local function ready_stamp(score)
  return score % BAND
end

local function stamp_due(stamp)
  return EPOCH + (stamp - stamp % SUB) / SUB
end

local function due_stamp(due)
  return (due - EPOCH) * SUB
end

local function delayed_score(due, priority)
  return due * 256 + (255 - priority)
end

local function first_id_floor(now)
  return (now - EPOCH) * IDS_PER_MS
end

local function delayed_due(score)
  return (score - score % 256) / 256
end

local function delayed_priority(score)
  return 255 - score % 256
end

local LEASE_SUB = 1024
-- Leases score 2^52 lower than an earlier version's did (a lease per delivery id): below
-- every score its recover reads as expired, so a client of that version running beside
-- this one never takes a claim's lease (leases.lua) for an id's and drops it. Exact while
-- until_ms * 1024 < 2^52, until the year 2109.
local LEASE_SHIFT = 4503599627370496

local function lease_score(until_ms, id)
  return -(until_ms * LEASE_SUB + id % LEASE_SUB) - LEASE_SHIFT
end

-- This version's leases that have run out by `now` score from this up to -LEASE_SHIFT.
local function expired_from(now)
  return -(now * LEASE_SUB + LEASE_SUB - 1) - LEASE_SHIFT
end

-- An earlier version's leases that have run out by `now` score at least this.
local function earlier_expired_from(now)
  return -(now * LEASE_SUB + LEASE_SUB - 1)
end
