#!lua flags=allow-oom
--[[
  The head of one slot of one group, for a cluster claim to choose from before it claims
  (storage/cluster_claim.py): promotes due delayed messages, then describes the best ready
  messages by priority band, best first, until the bands hold `depth` messages, and gives
  the earliest delayed due time. A band is counted whole (ZCOUNT, without reading its
  messages). On a serial topic only the messages a claim could take now count (the first
  of each key that is not in flight, includes/unlocked.lua), and only the first `depth`.

  KEYS[1]      the slot's generation (includes/generation.lua)
  KEYS[2]      the group's ready zset in this slot
  KEYS[3]      its delayed zset
  KEYS[4]      its key locks (serial topics)
  KEYS[5]      with the trace on (ARGV[7]): the slot's trace log (includes/trace.lua)
  ARGV[1]      now, epoch ms
  ARGV[2]      depth: describe bands until they hold this many messages
  ARGV[3]      1 if the topic is key-serial
  ARGV[4]      how many due delayed messages to promote at most
  ARGV[5]      serial topics: how deep to look for keys that are not in flight (>= depth)
  ARGV[6]      the topic's generation as the client read it from the registry ("": none)
  ARGV[7]      the topic's trace as the client read it: "" when off (its promotions are
               recorded)

  Returns {next_due or -1, more, then per band: priority, how many messages, the score of
  its first (oldest) message}; more is 1 when ready messages follow those described (all
  of a lower priority, or on a serial topic of the last band's or lower). When the topic is
  gone, touches nothing and returns the integer GONE_UNKNOWN or GONE_STALE, as claim.lua.

  Flags: allow-oom, since its promotion only moves messages already stored, so that
  consumers can drain a Redis that is out of memory.
  Housekeeping: what it writes is redone if lost, so a client waiting for replicas does not
  wait after it (storage/scripts.py).
]]
--- @housekeeping
--- @include "scores"
--- @include "promote"
--- @include "member"
--- @include "key_locks"
--- @include "unlocked"
--- @include "generation"
--- @include "trace"

local gone = topic_gone(KEYS[1], ARGV[6])
if gone then
  return gone
end

local now = tonumber(ARGV[1])
local depth = tonumber(ARGV[2])
local k = {ready = KEYS[2], delayed = KEYS[3], locks = KEYS[4]}
attach_trace(k, open_trace(ARGV[7], KEYS[5]))

-- Most slots have nothing delayed, or nothing due yet: one read of the delayed head says so.
local out = {-1, 0}
local later = rcall("ZRANGE", k.delayed, 0, 0, "WITHSCORES")
if later[2] and delayed_due(tonumber(later[2])) <= now then
  promote_due(k.ready, k.delayed, now, tonumber(ARGV[4]), k)
  trace_save(k.trace)
  later = rcall("ZRANGE", k.delayed, 0, 0, "WITHSCORES")
end
if later[2] then
  out[1] = delayed_due(tonumber(later[2]))
end

local function add(priority, n, first)
  local o = #out
  out[o + 1], out[o + 2], out[o + 3] = priority, n, first
end

if ARGV[3] == "1" then
  local n, first, priority = 0, nil, nil
  local more = unlocked_heads(k, depth, tonumber(ARGV[5]), function(score)
    local p = ready_priority(score)
    if p ~= priority then
      if priority then
        add(priority, n, first)
      end
      priority, n, first = p, 0, score
    end
    n = n + 1
  end)
  if priority then
    add(priority, n, first)
  end
  out[2] = more and 1 or 0
else
  -- By rank: the first message not yet described opens the next band, and ZCOUNT up to the
  -- band's last possible score counts it, without reading the messages themselves.
  local ready, described = rcall("ZCARD", k.ready), 0
  while described < math.min(depth, ready) do
    local first = tonumber(rcall("ZRANGE", k.ready, described, described, "WITHSCORES")[2])
    local p = ready_priority(first)
    local n = rcall("ZCOUNT", k.ready, fmt(first), fmt(ready_score(p - 1, 0) - 1))
    add(p, n, first)
    described = described + n
  end
  if ready > described then
    out[2] = 1
  end
end
return out
