#!lua
--[[
  Send a batch of messages to one slot, into every bound group whose filter accepts them,
  merging duplicates.

  KEYS[1]      string  the slot's generation (includes/generation.lua)
  KEYS[2]      string  the slot clock (last ready stamp handed out)
  KEYS[3..]    per bound group, the 11 group keys of includes/group_keys.lua, followed, when
               ARGV[4] names the slot, by the group's heads index: heads_ready, heads_delayed
               (includes/heads.lua)
  KEYS[n-1,n]  when ARGV[7] is "v<ms>": the slot's versions (hash) and versions_seen (zset)
               (includes/versions.lua)
  KEYS[n]      with the trace on (ARGV[6]): the slot's trace log (includes/trace.lua)
  ARGV[1]      the topic's generation as the client read it from the registry ("": none)
  ARGV[2]      now, epoch ms
  ARGV[3]      wake channel, published when a sleeping consumer has something new to do
  ARGV[4]      this slot's number when the topic keeps a heads index (single node, more
               than 16 slots), else ""
  ARGV[5]      the groups' filters as the client read them from the registry: "" when no
               group has one, else a JSON array with one entry per group in KEYS order, a
               filter program (includes/filter.lua) or 0 for none
  ARGV[6]      the topic's trace as the client read it: "" when off (includes/trace.lua)
  ARGV[7]      "1" if the topic merges by key (includes/pending.lua), "v<ms>" if it does
               and the runs may carry versions (<ms>: the topic's version_retention,
               includes/versions.lua), else ""
  ARGV[8]      the groups' supersede as the client read it from the registry: "" when no
               group supersedes, else JSON {channel, groups}: the topic's stop channel,
               and per group in KEYS order [name, supersede_limit] or 0
               (includes/running.lua)
  ARGV[9..]    runs of messages sharing a priority and a due time, in send order, each:
               priority (0-255), due (epoch ms; <= now means ready now), n, then n members;
               or, carrying versions, priority, due, -n, n versions, n members
               (includes/versions.lua)

  Returns one integer per message: 1 when it stored nothing new (it merged into a pending
  message in every group that accepted it, and one did), 2 (OUTDATED) when it was dropped
  as older than its identity's version, else 0; or, storing nothing, the integer
  GONE_UNKNOWN or GONE_STALE when the topic is gone. A group counts what it accepts as
  `sent` (and `merged`), what its filter rejects as `filtered`, the running deliveries a
  send supersedes as `superseded`, an outdated message as `outdated`.

  No flags: without allow-oom, Redis refuses the whole script when it is out of memory,
  instead of failing at its first write and leaving a batch half sent.
]]
--- @include "pending"
--- @include "generation"
--- @include "trace"
--- @include "enqueue_batch"

local gone = topic_gone(KEYS[1], ARGV[1])
if gone then
  return gone
end

local now = tonumber(ARGV[2])
local clock = open_clock(KEYS[2], now)
local tracer, last_key = open_batch_trace(ARGV[6])
local versions
versions, last_key = Versions.open(ARGV[7], last_key)
local merged = enqueue_batch(ARGV, 9, 3, last_key, now, clock, ARGV[4], ARGV[5], tracer,
  ARGV[7] ~= "", ARGV[8], versions)
trace_save(tracer)
finish(clock, ARGV[3])
return merged
