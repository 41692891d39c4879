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
  KEYS[8 or 9..] per bound group, the 11 group keys of includes/group_keys.lua, followed,
               when ARGV[6] names the slot, by the group's heads_ready and heads_delayed
  KEYS[n-1,n]  when ARGV[10] is "v<ms>": the slot's versions and versions_seen
               (includes/versions.lua)
  KEYS[n]      with the trace on (ARGV[8]): the slot's trace log (includes/trace.lua)
  ARGV[1..4]   the transaction's arguments, named in includes/tx_args.lua: tx_id, now (the
               commit's time), retention_ms, generation
  ARGV[5]      channel: the wake channel, published when a sleeping consumer has something
               new to do
  ARGV[6]      heads_slot: this slot's number when the topic keeps a heads index, else ""
  ARGV[7]      filters: the groups' filters, as enqueue.lua's ARGV[5]
  ARGV[8]      trace: the topic's trace as the client read it, "" when off
               (includes/trace.lua); on, each half message committed is traced as sent or
               merged
  ARGV[9]      topic_record: "1" when KEYS[8] is the topic's closed ids, else ""
  ARGV[10]     by_key: "" in body mode; merging by key (includes/pending.lua),
               "v<ms>": the halves' versions are checked (includes/versions.lua; <ms>: the
               topic's version_retention), or "1"
  ARGV[11]     stops: the groups' supersede, as enqueue.lua's ARGV[8]

  Returns {TX_DONE, halves, merged, outdated} when this call committed (merged: how many
  of them stored nothing new; outdated: how many were dropped as older than their
  identity's version), {TX_COMMITTED or TX_ROLLED_BACK, 0, 0} when the slot closed it
  before (or, KEYS[8], the topic rolled it back), {TX_UNKNOWN, 0, 0} when the slot never
  held it (or forgot it; the topic's record, KEYS[8], is written all the same), or the
  integer GONE_UNKNOWN or GONE_STALE when the topic is gone.

  No flags: it grows memory (as a send does), so Redis refuses it whole when out of memory
  and the transaction stays open, to be committed again.
]]
--- @include "tx_args"
--- @include "pending"
--- @include "generation"
--- @include "trace"
--- @include "enqueue_batch"
--- @include "tx_state"

local tx_id, now, retention_ms, generation = tx_args()
local gone = topic_gone(KEYS[1], generation)
if gone then
  return gone
end

local channel, heads_slot, filters, trace, topic_record, by_key, stops = unpack(ARGV, 5, 11)
local first_group = 8
local t = tx_keys(3, nil)
if topic_record == "1" then
  t.topic, first_group = KEYS[8], 9
end
local state = tx_close_refused(t, tx_id, now, retention_ms, true)
if state then
  return {tx_state_code(state), 0, 0}
end
-- An open transaction holds at least one half message in each slot it is open in.
local halves = rcall("LRANGE", t.halves, 0, -1)
if #halves == 0 then
  if t.topic then  -- the topic's record says committed, whatever slots held it
    remember_closed(t.topic, tx_id, now, true, retention_ms)
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
  if n < 0 then  -- n versions before the members (includes/versions.lua)
    n = -n
    i = i + n
  end
  held = held + n
  i = i + 3 + n
end

local merged, outdated = 0, 0
local clock = open_clock(KEYS[2], now)
local tracer, last_key = open_batch_trace(trace)
local versions
versions, last_key = Versions.open(by_key, last_key)
for _, flag in ipairs(enqueue_batch(halves, 1, first_group, last_key, now, clock, heads_slot,
                                    filters, tracer, by_key ~= "", stops, versions)) do
  if flag == 1 then
    merged = merged + 1
  elseif flag == Versions.OUTDATED then
    outdated = outdated + 1
  end
end
trace_save(tracer)
finish(clock, channel)
tx_close(t, tx_id, now, true, retention_ms, held)
return {TX_DONE, held, merged, outdated}
