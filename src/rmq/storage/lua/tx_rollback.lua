#!lua flags=allow-oom
--[[
  Roll a transaction back in one slot: its half messages are dropped and the id remembered
  as rolled back. Atomic and idempotent, as tx_commit.lua.

  KEYS[1]      string  the slot's generation (includes/generation.lua)
  KEYS[2..6]   the transaction's keys in the slot (includes/tx_state.lua): open (zset),
               closed (zset), halves (list), parts (hash), counts (hash)
  KEYS[7]      zset    on a single node only: the topic's closed ids, read and written here
                       (on a cluster the client writes them first: tx_decide.lua)
  ARGV[1]      the topic's generation as the client read it ("": none)
  ARGV[2]      now, epoch ms
  ARGV[3]      the transaction id
  ARGV[4]      tx_retention, ms: how long a closed id is remembered

  Returns {TX_DONE, halves} when this call rolled back, {TX_COMMITTED or TX_ROLLED_BACK, 0}
  when the slot closed it before (or, KEYS[7], the topic committed it), {TX_UNKNOWN, 0}
  when the slot never held it (the topic's record, KEYS[7], is written all the same), or
  the integer
  GONE_UNKNOWN or GONE_STALE when the topic is gone.

  Flags: allow-oom, since it frees memory: a full Redis can still drop half messages.
]]
--- @include "generation"
--- @include "tx_state"

local gone = topic_gone(KEYS[1], ARGV[1])
if gone then
  return gone
end

local now = tonumber(ARGV[2])
local id = ARGV[3]
local t = tx_keys(2, KEYS[7])
local retention = tonumber(ARGV[4])
local state = tx_close_refused(t, id, now, retention, false)
if state then
  return {tx_state_code(state), 0}
end
if not rcall("ZSCORE", t.open, id) then
  if t.topic then  -- the topic's record says rolled back, whatever slots held it
    remember_closed(t.topic, id, now, false, retention)
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
tx_close(t, id, now, false, retention, held)
return {TX_DONE, held}
