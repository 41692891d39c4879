#!lua
--[[
  Send a batch of messages to one slot, into every bound group whose filter accepts them,
  merging duplicates.

  KEYS[1]      string  the slot's generation (includes/generation.lua)
  KEYS[2]      string  the slot clock (last ready stamp handed out)
  KEYS[3..]    per bound group, the 9 group keys of includes/group_keys.lua, followed, when
               ARGV[4] names the slot, by the group's heads index: heads_ready, heads_delayed
               (includes/heads.lua)
  KEYS[n-1..n] with the trace on (ARGV[6]): the slot's trace keys, events and tally
               (includes/trace.lua)
  ARGV[1]      the topic's generation as the client read it from the registry ("": none)
  ARGV[2]      now, epoch ms
  ARGV[3]      wake channel, published when a sleeping consumer has something new to do
  ARGV[4]      this slot's number when the topic keeps a heads index (single node, more
               than 16 slots), else ""
  ARGV[5]      the groups' filters as the client read them from the registry: "" when no
               group has one, else a JSON array with one entry per group in KEYS order, a
               filter program (includes/filter.lua) or 0 for none
  ARGV[6]      the topic's trace as the client read it: "" when off (includes/trace.lua)
  ARGV[7..]    runs of messages sharing a priority and a due time, in send order, each:
               priority (0-255), due (epoch ms; <= now means ready now), n, then n members

  Returns one integer per message: 1 when it stored nothing new (it merged into a pending
  message in every group that accepted it, and one did); or, storing nothing, the integer
  GONE_UNKNOWN or GONE_STALE when the topic is gone. A group counts what it accepts as
  `sent` (and `merged`), what its filter rejects as `filtered`.

  No flags: without allow-oom, Redis refuses the whole script when it is out of memory,
  instead of failing at its first write and leaving a batch half sent.
]]
--- @include "pending"
--- @include "group_keys"
--- @include "generation"
--- @include "heads"
--- @include "member"
--- @include "filter"
--- @include "trace"

local gone = topic_gone(KEYS[1], ARGV[1])
if gone then
  return gone
end

local now = tonumber(ARGV[2])
local clock = open_clock(KEYS[2], now)

local tracer = open_trace(ARGV[6], KEYS[#KEYS - 1], KEYS[#KEYS])
local last_key = tracer and #KEYS - 2 or #KEYS

local runs = {}
local total = 0
local i = 7
while i <= #ARGV do
  local n = tonumber(ARGV[i + 2])
  runs[#runs + 1] = {tonumber(ARGV[i]), tonumber(ARGV[i + 1]), i + 3, i + 2 + n, total}
  total = total + n
  i = i + 3 + n
end

local slot = ARGV[4]
local stride = slot == "" and GROUP_KEY_COUNT or GROUP_KEY_COUNT + 2
local filters = ARGV[5] ~= "" and cjson.decode(ARGV[5]) or nil

local function open_group(first)
  local k = group_keys(first)
  if slot ~= "" then
    attach_heads(k, KEYS[first + GROUP_KEY_COUNT], KEYS[first + GROUP_KEY_COUNT + 1], slot)
  end
  attach_trace(k, tracer)
  return k
end

-- The filter of the group whose keys start at KEYS[first], as accepts(i) over ARGV[i], or
-- nil when it has none. A member's tag and properties are decoded once for all groups.
local metas = {}
local function group_filter(first)
  local program = filters and filters[(first - 3) / stride + 1]
  if type(program) ~= "table" then
    return nil
  end
  local passes = compile_filter(program)
  return function(at)
    local meta = metas[at]
    if not meta then
      local tag, props = member_meta(ARGV[at])
      meta = {tag, props}
      metas[at] = meta
    end
    return passes(meta[1], meta[2])
  end
end

-- Per message: 2 while no group has accepted it, 1 while every group that did merged it,
-- 0 once a group stored it new.
local UNSEEN = filters and 2 or 1

-- A single send: put_pending itself, which put_pending_run is defined to equal message by
-- message, without the batch path's tables and closures (a sixth of a single send's
-- server instructions, CHANGELOG.md).
if total == 1 then
  local priority, due, at = runs[1][1], runs[1][2], runs[1][3]
  local member = ARGV[at]
  local merged_everywhere = UNSEEN
  for first = 3, last_key, stride do
    local k = open_group(first)
    local accepts = group_filter(first)
    if accepts and not accepts(at) then
      rcall("HINCRBY", k.counters, "filtered", 1)
    else
      rcall("HINCRBY", k.counters, "sent", 1)
      if put_pending(k, member, priority, due, now, clock, nil) then
        rcall("HINCRBY", k.counters, "merged", 1)
        if merged_everywhere == 2 then
          merged_everywhere = 1
        end
        if tracer then
          trace_merged(k, member)
        end
      else
        merged_everywhere = 0
        if tracer then
          trace_message(k, "sent", member)
        end
      end
    end
  end
  trace_save(tracer)
  finish(clock, ARGV[3])
  return {merged_everywhere == 1 and 1 or 0}
end

local merged_everywhere = {}
for n = 1, total do
  merged_everywhere[n] = UNSEEN
end

for first = 3, last_key, stride do
  local k = open_group(first)
  local accepts = group_filter(first)
  local merged, accepted = 0, 0
  for _, run in ipairs(runs) do
    local offset = run[5]
    local on_send = function(n, was_merged)
      accepted = accepted + 1
      if was_merged then
        merged = merged + 1
        if merged_everywhere[offset + n] == 2 then
          merged_everywhere[offset + n] = 1
        end
      else
        merged_everywhere[offset + n] = 0
      end
    end
    if tracer then
      local counted, from = on_send, run[3]
      on_send = function(n, was_merged)
        if was_merged then
          trace_merged(k, ARGV[from + n - 1])
        else
          trace_message(k, "sent", ARGV[from + n - 1])
        end
        counted(n, was_merged)
      end
    end
    put_pending_run(k, run[3], run[4], run[1], run[2], now, clock, on_send, accepts)
  end
  if accepted > 0 then
    rcall("HINCRBY", k.counters, "sent", accepted)
  end
  if accepted < total then
    rcall("HINCRBY", k.counters, "filtered", total - accepted)
  end
  if merged > 0 then
    rcall("HINCRBY", k.counters, "merged", merged)
  end
end
trace_save(tracer)
finish(clock, ARGV[3])
if filters then
  for n = 1, total do
    if merged_everywhere[n] == 2 then
      merged_everywhere[n] = 0
    end
  end
end
return merged_everywhere
