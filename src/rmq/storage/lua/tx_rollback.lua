#!lua flags=allow-oom
--[[
  Roll a transaction back in one slot: its half messages are dropped and the id remembered
  as rolled back. Atomic and idempotent, as tx_commit.lua.

  KEYS[1]      string  the slot's generation (includes/generation.lua)
  KEYS[2..6]   the transaction's keys in the slot (includes/tx_state.lua): open (zset),
               closed (zset), halves (list), parts (hash), counts (hash)
  KEYS[7]      zset    on a single node only: the topic's closed ids, read and written here
                       (on a cluster the client writes them first: tx_decide.lua)
  ARGV[1..4]   the transaction's arguments, named in includes/tx_args.lua: tx_id, now,
               retention_ms, generation; no arguments of its own

  Returns {TX_DONE, halves} when this call rolled back, {TX_COMMITTED or TX_ROLLED_BACK, 0}
  when the slot closed it before (or, KEYS[7], the topic committed it), {TX_UNKNOWN, 0}
  when the slot never held it (the topic's record, KEYS[7], is written all the same), or
  the integer
  GONE_UNKNOWN or GONE_STALE when the topic is gone.

  Flags: allow-oom, since it frees memory: a full Redis can still drop half messages.
]]
--- @include "tx_args"
--- @include "generation"
--- @include "tx_state"

local tx_id, now, retention_ms, generation = tx_args()
local gone = topic_gone(KEYS[1], generation)
if gone then
  return gone
end

local t = tx_keys(2, KEYS[7])
local state = tx_close_refused(t, tx_id, now, retention_ms, false)
if state then
  return {tx_state_code(state), 0}
end
if not rcall("ZSCORE", t.open, tx_id) then
  if t.topic then  -- the topic's record says rolled back, whatever slots held it
    remember_closed(t.topic, tx_id, now, false, retention_ms)
  end
  return {TX_UNKNOWN, 0}
end
-- what the parts stored here (the fields that are no part's start with ":")
local held = 0
local parts = rcall("HGETALL", t.parts)
for j = 1, #parts, 2 do
  if string.byte(parts[j], 1) ~= 58 then
    held = held + tonumber(parts[j + 1])
  end
end
tx_close(t, tx_id, now, false, retention_ms, held)
return {TX_DONE, held}
