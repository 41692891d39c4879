#!lua
--[[
  Commit a transaction in one slot: its half messages become pending in every bound group
  whose filter accepts them, exactly as a send of them now would (includes/enqueue_batch:
  merging, filters, counters; a delay counts from now), and the id is remembered as
  committed. Atomic, and idempotent: a second commit finds it committed and does nothing.

  KEYS[1]      string  the slot's generation (includes/generation.lua)
  KEYS[2]      string  the slot clock (last ready stamp handed out)
  KEYS[3..7]   the transaction's keys in the slot (includes/tx_state.lua): open (zset),
               closed (zset), halves (list), parts (hash), counts (hash)
  KEYS[8]      zset    when ARGV[9] is "1" (a single node): the topic's closed ids, read
                       and written here (on a cluster the client writes them first:
                       tx_decide.lua)
  KEYS[8 or 9..] per bound group, the 9 group keys of includes/group_keys.lua, followed,
               when ARGV[4] names the slot, by the group's heads_ready and heads_delayed
  KEYS[n]      with the trace on (ARGV[8]): the slot's trace log (includes/trace.lua)
  ARGV[1]      the topic's generation as the client read it ("": none)
  ARGV[2]      now, epoch ms: the commit's time
  ARGV[3]      wake channel, published when a sleeping consumer has something new to do
  ARGV[4]      this slot's number when the topic keeps a heads index, else ""
  ARGV[5]      the groups' filters, as enqueue.lua's ARGV[5]
  ARGV[6]      the transaction id
  ARGV[7]      tx_retention, ms: how long a closed id is remembered
  ARGV[8]      the topic's trace as the client read it: "" when off (includes/trace.lua);
               on, each half message committed is traced as sent or merged
  ARGV[9]      "1" when KEYS[8] is the topic's closed ids, else ""

  Returns {TX_DONE, halves, merged} when this call committed (merged: how many of them
  stored nothing new), {TX_COMMITTED or TX_ROLLED_BACK, 0, 0} when the slot closed it
  before (or, KEYS[8], the topic rolled it back), {TX_UNKNOWN, 0, 0} when the slot never
  held it (or forgot it; the topic's record, KEYS[8], is written all the same), or the
  integer GONE_UNKNOWN or GONE_STALE when the topic is gone.

  No flags: it grows memory (as a send does), so Redis refuses it whole when out of memory
  and the transaction stays open, to be committed again.
]]
--- @include "pending"
--- @include "generation"
--- @include "trace"
--- @include "enqueue_batch"
--- @include "tx_state"

local gone = topic_gone(KEYS[1], ARGV[1])
if gone then
  return gone
end

local now = tonumber(ARGV[2])
local id = ARGV[6]
local first_group = 8
local t = tx_keys(3, nil)
if ARGV[9] == "1" then
  t.topic, first_group = KEYS[8], 9
end
local retention = tonumber(ARGV[7])
local state = tx_close_refused(t, id, now, retention, true)
if state then
  return {tx_state_code(state), 0, 0}
end
-- An open transaction holds at least one half message in each slot it is open in.
local halves = rcall("LRANGE", t.halves, 0, -1)
if #halves == 0 then
  if t.topic then  -- the topic's record says committed, whatever slots held it
    remember_closed(t.topic, id, now, true, retention)
  end
  return {TX_UNKNOWN, 0, 0}
end

-- The halves as enqueue.lua's runs, each due resolved against the commit's time.
local held = 0
local i = 1
while i <= #halves do
  local due = halves[i + 1]
  if string.byte(due, 1) == 43 then  -- "+<ms>": after the commit
    halves[i + 1] = now + tonumber(string.sub(due, 2))
  elseif tonumber(due) < now then
    -- a fixed time already past: due now, as a send now (merging, it keeps the place of
    -- a pending message due earlier, as a send's does)
    halves[i + 1] = now
  end
  local n = tonumber(halves[i + 2])
  held = held + n
  i = i + 3 + n
end

local merged = 0
local clock = open_clock(KEYS[2], now)
local tracer, last_key = open_batch_trace(ARGV[8])
for _, flag in ipairs(enqueue_batch(halves, 1, first_group, last_key, now, clock, ARGV[4],
                                    ARGV[5], tracer)) do
  merged = merged + flag
end
trace_save(tracer)
finish(clock, ARGV[3])
tx_close(t, id, now, true, retention, held)
return {TX_DONE, held, merged}
