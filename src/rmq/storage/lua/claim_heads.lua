#!lua flags=allow-oom,allow-cross-slot-keys
--[[
  Claim up to `count` due messages of one group on a single node, highest priority first,
  then earliest due, topic-wide, like claim.lua, for a topic that keeps a heads index
  (more than 16 slots; includes/heads.lua): instead of every slot, the client passes a
  window of slots, and the index says which slots can hold the best messages.

  The index is a lazy priority queue. Slots are opened in the order of their ready index
  entry; an entry is at most the slot's real head, so the best message of the opened slots
  is the best of the topic as long as it is no worse than the next entry not opened yet
  (by priority and due millisecond, the order docs/semantics.md promises across slots).
  When that next entry's slot is outside the window, the claim stops there and asks for
  the slot (with the next ones), and the client calls again with them: what it claimed so
  far was exact. Due delayed messages are promoted first in every slot the delayed index
  says is due; a due slot outside the window is asked for likewise, and nothing is claimed
  before it is promoted. Every opened slot's entries are then set to its real heads (the
  entry of a slot left empty removed). A client with no index yet, or whose index was last
  built RESYNC ms ago or more by Redis's clock, is told to rebuild it first
  (sync_heads.lua): topics created before the index get one on first use, and a slot the
  index lost (a bug, a client of an older version sending) waits at most that long.

  KEYS[1]      the generation of slot 0 (includes/generation.lua; delete_topic removes the
               slots' generations in slot order, so slot 0's goes first)
  KEYS[2]      zset  heads_ready: slot -> lowest ready score (includes/heads.lua)
  KEYS[3]      zset  heads_delayed: slot -> earliest delayed due, epoch ms
  KEYS[4]      string heads_synced: when the index was last built, epoch ms of Redis's clock
  KEYS[5..]    per slot of the window, 12 keys: the slot's delivery-id counter, then the 11
               group keys (with the trace on, 13: then the slot's trace log);
               then the group's 5 limit keys (includes/limit_claim.lua)
  ARGV[1..14]  the claim's arguments, named in includes/claim_args.lua, as claim.lua's:
               now, max_count, lease_ms, serial, promote_limit, scan, generation, holder,
               limit_group, limit_waiter, limit_wait_ms (the group's limits,
               includes/limit_claim.lua), trace, by_key, supersede
  ARGV[15]     RESYNC: rebuild the index when it was last built this many ms ago or more
  ARGV[16]     how many slots of the ready index to return as the next window
  ARGV[17]     at most this many slots to ask for
  ARGV[18]     how many messages to read from a slot at a time
  ARGV[19..]   the window: the slot number of each slot in KEYS, in KEYS order

  Returns {next_due, needed, window, then the claimed messages as in claim.lua (take.lua's
  take_chosen: the shares' first delivery ids, then runs of messages that share a header),
  then what limit_claim.lua's limit_close appends}.
  next_due: the earliest delayed due time when fewer than `count` were claimed, else -1
  (or when the slot that may hold it is outside the window: then it is asked for).
  needed: slots outside the window to call again with (empty when the claim is complete).
  window: the slots at the head of the index afterwards, for the next claim. Returns the
  integer NEED_SYNC (2) when the index must be rebuilt first, and when the topic is gone
  claims nothing and returns GONE_UNKNOWN or GONE_STALE.

  Flags: allow-oom, since it only moves messages already stored (into in flight) and keeps
  the small index, so that consumers can drain a Redis that is out of memory;
  allow-cross-slot-keys, since one call reads many slots of the topic.
]]
--- @include "scores"
--- @include "promote"
--- @include "group_keys"
--- @include "key_locks"
--- @include "unlocked"
--- @include "records"
--- @include "claim_args"
--- @include "take"
--- @include "heap"
--- @include "slot_stream"
--- @include "zset_pages"
--- @include "heads_upkeep"
--- @include "server_clock"
--- @include "limit_claim"

local NEED_SYNC = 2

local gone, now, max_count, lease_ms, serial, promote_limit, scan, generation, holder,
  limit_group, limit_waiter, limit_wait_ms, trace, by_key, supersede = claim_args(KEYS[1])
if gone then
  return gone
end
local lease_until = now + lease_ms

local heads_ready, heads_delayed = KEYS[2], KEYS[3]
local clock_ms = server_ms()
local synced = tonumber(rcall("GET", KEYS[4]))
if not synced or math.abs(clock_ms - synced) >= tonumber(ARGV[15]) then
  return NEED_SYNC
end
local limit, count = limit_open(now, max_count, limit_group, limit_waiter, limit_wait_ms)
local report = tonumber(ARGV[16])
local need_max = tonumber(ARGV[17])
local first_read = math.min(tonumber(ARGV[18]), count)

-- The window: slot number -> index i in KEYS order; slots[i], the slot's group key table,
-- is built when first used (a claim opens a fraction of the slots it is passed).
local index_of = {}
local stride = claim_stride(trace)
for i = 1, (#KEYS - 4 - limit_key_count(limit_group)) / stride do
  index_of[ARGV[18 + i]] = i
end
local slots = setmetatable({}, {__index = function(built, i)
  local first = 5 + (i - 1) * stride
  local k = group_keys(first + 1)
  k.seq = KEYS[first]
  k.by_key = by_key
  k.slot = ARGV[18 + i]
  attach_trace(k, claim_trace(trace, first))
  built[i] = k
  return k
end})

local needed, is_needed = {}, {}
local function need(slot)
  if not is_needed[slot] and #needed < need_max then
    is_needed[slot] = true
    needed[#needed + 1] = tonumber(slot)
  end
end

-- Promotion. Every slot with a due entry, at most one per slot: bounded by the slot count.
for _, slot in ipairs(rcall("ZRANGEBYSCORE", heads_delayed, "-inf", fmt(now))) do
  local i = index_of[slot]
  if i then
    local k = slots[i]
    promote_due(k.ready, k.delayed, now, promote_limit, k)
    refresh_delayed(heads_delayed, k, slot)
    -- lower the ready entry also when another script (stats) promoted without the index
    local best = head_of(k.ready)
    if best then
      rcall("ZADD", heads_ready, "LT", fmt(best), slot)
    end
  else
    need(slot)
  end
end

-- Opened slots in a min-heap (includes/heap.lua) by their stream's rank (slot_stream.lua);
-- at an equal key a read candidate comes first, then a slot to read on, then the index's
-- next slot (class 2, not opened yet).
local streams = {}  -- per slot index: its stream
local heap = new_heap()
local hv, hs = heap.v, heap.s  -- the least rank and its slot index: hv[1], hs[1]

-- A slot's candidates: on a serial topic its unlocked heads, read once; otherwise its
-- ready zset a chunk at a time.
local function open(i)
  local s = new_stream(first_read)
  streams[i] = s
  if serial then
    unlocked_heads(slots[i], count, scan, function(score, member)
      s.members[#s.members + 1] = member
      s.scores[#s.scores + 1] = score
    end)
  else
    stream_read(s, slots[i].ready)
  end
  local rank = stream_rank(s)
  if rank then
    heap_push(heap, i, rank)
  end
end

-- The index a page at a time (reading an entry costs about a microsecond: most claims
-- need few); nothing writes it during the merge, so ranks stay put.
local index = new_pages(heads_ready, 32)

local taken = new_taken(serial, by_key, supersede, slots)
if #needed == 0 then
  while taken.n < count do
    local slot, bound = pages_peek(index)
    if heap.n > 0 and (not slot or hv[1] < ms_key(bound) * 4 + 2) then
      local i = hs[1]
      local s = streams[i]
      if hv[1] % 4 == 1 then
        stream_read(s, slots[i].ready)  -- its rank can only rise
      else
        take(taken, i, s.scores[s.pos], s.members[s.pos])
        s.pos = s.pos + 1
      end
      local rank = stream_rank(s)
      if rank then
        hv[1] = rank
        heap_sift_down(heap, 1)  -- at an equal rank it stays on top: a slot's run in one go
      else
        heap_pop(heap)
      end
    elseif slot then
      pages_skip(index)
      local i = index_of[slot]
      if i then
        open(i)
      else
        -- this slot may hold a message as good: ask for it, and the next ones, and stop
        need(slot)
        while #needed < need_max do
          slot = pages_peek(index)
          if not slot then
            break
          end
          pages_skip(index)
          if not index_of[slot] then
            need(slot)
          end
        end
        break
      end
    else
      break
    end
  end
end

local out = {-1, needed, {}}
take_chosen(slots, taken, now, lease_until, holder_part(holder), out)
if trace ~= "" then
  trace_taken(slots, out, 4, holder, taken.score, by_key and taken.member)
  for _, k in pairs(slots) do
    trace_save(k.trace)
  end
end

-- Every opened slot's entry becomes its head now (slot_stream.lua's stream_head; a serial
-- topic's candidates skip locked keys, so its slots' heads are read); removed when empty.
local heads, emptied = {}, {}
for i, s in pairs(streams) do
  local head
  if serial then
    head = head_of(slots[i].ready)
  else
    head = stream_head(s)
  end
  if head then
    heads[#heads + 1] = fmt(head)
    heads[#heads + 1] = slots[i].slot
  else
    emptied[#emptied + 1] = slots[i].slot
  end
end
save_ready_heads(heads_ready, heads, emptied)

-- The next due time, exact (heads_upkeep.lua); a slot outside the window is asked for.
if taken.n < count and #needed == 0 then
  out[1] = next_due_checked(heads_delayed, index_of, slots, need) or -1
end
local window = out[3]
for _, slot in ipairs(rcall("ZRANGE", heads_ready, 0, report - 1)) do
  window[#window + 1] = tonumber(slot)
end
for _, slot in ipairs(rcall("ZRANGE", heads_delayed, 0, 3)) do
  window[#window + 1] = tonumber(slot)
end
return limit_close(limit, taken, out, 4, function(i) return slots[i].slot end, lease_until)
