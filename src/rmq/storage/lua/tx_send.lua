#!lua
--[[
  Store a transaction's half messages in one slot: kept apart from every group (invisible,
  merged with nothing) until the transaction commits (tx_commit.lua) or rolls back. The
  first half send registers the transaction as open in the slot: beginning one costs no
  call of its own.

  A *part* is one sender's share of the transaction (a handle, or one Spark partition);
  ARGV[6] says how many half messages the part stored here before this call. A part sent
  again from the start (a re-run of the same sends) finds them counted and stores only what
  goes beyond: a replay stores nothing twice.

  KEYS[1]      string  the slot's generation (includes/generation.lua)
  KEYS[2..6]   the transaction's keys in the slot (includes/tx_state.lua): open (zset),
               closed (zset), halves (list), parts (hash), counts (hash)
  KEYS[7]      zset    on a single node only: the topic's closed ids (includes/tx_state.lua;
                       on a cluster the client reads them before this call)
  ARGV[1..4]   the transaction's arguments, named in includes/tx_args.lua: tx_id, now
               (the last half send's time, from which check_after counts), retention_ms,
               generation
  ARGV[5]      part: the part's name
  ARGV[6]      before: how many half messages the part sent to this slot before this call
  ARGV[7..]    runs of messages sharing a priority and a due, in send order, each:
               priority (0-255), due ("+<ms>": that long after the commit; else epoch ms),
               n, then n members; or, carrying versions, -n, n versions, n members
               (includes/versions.lua), kept as they came

  Returns {TX_DONE, stored} (stored: the half messages this call added), or, storing
  nothing, {TX_COMMITTED or TX_ROLLED_BACK, 0} for a transaction closed in this slot or
  (KEYS[7]) in any slot of the topic, or the integer
  GONE_UNKNOWN or GONE_STALE when the topic is gone.

  No flags: it grows memory, so Redis refuses it whole when out of memory.
]]
--- @include "tx_args"
--- @include "generation"
--- @include "bulk"
--- @include "tx_state"

local tx_id, now, retention_ms, generation = tx_args()
local gone = topic_gone(KEYS[1], generation)
if gone then
  return gone
end

local t = tx_keys(2, KEYS[7])
local state = tx_closed(t, tx_id, now, retention_ms)
if state then
  return {tx_state_code(state), 0}
end

local part, before = ARGV[5], tonumber(ARGV[6])
local FIRST_RUN = 7
local counted = tonumber(rcall("HGET", t.parts, part) or 0)
local skip = counted - before  -- this part's messages a previous run of it stored already
local items, stored, sent = {}, 0, 0
local i = FIRST_RUN
if skip <= 0 then  -- no replay: store the runs as they came
  items = nil
  while i <= #ARGV do
    local n = tonumber(ARGV[i + 2])
    if n < 0 then  -- n versions before the members (includes/versions.lua)
      n = -n
      i = i + n
    end
    sent = sent + n
    i = i + 3 + n
  end
  stored = sent
end
while i <= #ARGV do
  local n = tonumber(ARGV[i + 2])
  local versioned = n < 0  -- n versions before the members: kept as the members are
  n = math.abs(n)
  local members = versioned and i + 3 + n or i + 3
  local skipped = math.min(math.max(skip, 0), n)
  skip = skip - skipped
  local kept = n - skipped
  if kept > 0 then
    items[#items + 1] = ARGV[i]
    items[#items + 1] = ARGV[i + 1]
    items[#items + 1] = versioned and -kept or kept
    local from = versioned and i + 3 + skipped or members + skipped
    for j = from, members + n - 1 do
      if j < members or j >= members + skipped then
        items[#items + 1] = ARGV[j]
      end
    end
    stored = stored + kept
  end
  sent = sent + n
  i = members + n
end

local sent_at = fmt(now)
local opened = rcall("ZADD", t.open, sent_at, tx_id) == 1
if stored > 0 then
  if items then
    bulk("RPUSH", t.halves, items)
  else
    for from = FIRST_RUN, #ARGV, 1000 do
      rcall("RPUSH", t.halves, unpack(ARGV, from, math.min(from + 999, #ARGV)))
    end
  end
  if opened then
    rcall("HSET", t.parts, part, before + sent, ":opened", sent_at)
  else
    rcall("HSET", t.parts, part, before + sent)
  end
  rcall("HINCRBY", t.counts, "halves", stored)
elseif opened then
  rcall("HSET", t.parts, ":opened", sent_at)
end
return {TX_DONE, stored}
