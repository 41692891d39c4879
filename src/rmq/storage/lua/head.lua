#!lua flags=allow-oom
--[[
  The head of one slot of one group, for a cluster claim to choose from before it claims
  (storage/cluster_claim.py): promotes due delayed messages, then describes the best ready
  messages by priority band, best first, until the bands hold `depth` messages, and gives
  the earliest delayed due time. A band is counted whole (ZCOUNT, without reading its
  messages). On a serial topic only the messages a claim could take now count (the first
  of each key that is not in flight, includes/unlocked.lua), and only the first `depth`;
  likewise in a superseding group of a topic merging by key, only the messages whose
  identity has no delivery in flight (the others wait: includes/take.lua).

  KEYS[1]      the slot's generation (includes/generation.lua)
  KEYS[2]      the group's ready zset in this slot
  KEYS[3]      its delayed zset
  KEYS[4]      its key locks (serial topics)
  KEYS[5]      its running hash (includes/running.lua)
  KEYS[6]      its in-flight records
  KEYS[7]      with the trace on (ARGV[7]): the slot's trace log (includes/trace.lua)
  ARGV[1]      now, epoch ms
  ARGV[2]      depth: describe bands until they hold this many messages
  ARGV[3]      1 if the topic is key-serial; 2 if the group supersedes and the topic merges
               by key (messages of an identity in flight wait); else 0
  ARGV[4]      how many due delayed messages to promote at most
  ARGV[5]      modes 1 and 2: how deep to look for keys that are not in flight (>= depth)
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
--- @include "running"

local gone = topic_gone(KEYS[1], ARGV[6])
if gone then
  return gone
end

local now = tonumber(ARGV[1])
local depth = tonumber(ARGV[2])
local k = {ready = KEYS[2], delayed = KEYS[3], locks = KEYS[4], running = KEYS[5],
  inflight = KEYS[6]}
attach_trace(k, open_trace(ARGV[7], KEYS[7]))

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

-- Bands of the messages a claim could take, in score order, handed one at a time.
local n, first, priority = 0, nil, nil
local function count(score)
  local p = ready_priority(score)
  if p ~= priority then
    if priority then
      add(priority, n, first)
    end
    priority, n, first = p, 0, score
  end
  n = n + 1
end

if ARGV[3] == "1" then
  local more = unlocked_heads(k, depth, tonumber(ARGV[5]), count)
  if priority then
    add(priority, n, first)
  end
  out[2] = more and 1 or 0
elseif ARGV[3] == "2" and rcall("EXISTS", k.running) == 1 then
  -- at most one message waits per delivery in flight: a page past `depth` is rarely read
  local window, offset, counted, read = tonumber(ARGV[5]), 0, 0, 0
  while counted < depth and offset < window do
    local page = rcall("ZRANGE", k.ready, offset, offset + depth - 1, "WITHSCORES")
    for j = 1, #page, 2 do
      read = read + 1
      local id = entry_of(rcall("HGET", k.running, "=" .. page[j]))
      if not (id and rcall("HEXISTS", k.inflight, id) == 1) then
        count(tonumber(page[j + 1]))
        counted = counted + 1
        if counted == depth then
          break
        end
      end
    end
    if #page < 2 * depth then
      break
    end
    offset = offset + depth
  end
  local more = rcall("ZCARD", k.ready) > read
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
