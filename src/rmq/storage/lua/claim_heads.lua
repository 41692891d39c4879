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
  KEYS[5..]    per slot of the window, 10 keys: the slot's delivery-id counter, then the 9
               group keys
  ARGV[1]      now, epoch ms
  ARGV[2]      count
  ARGV[3]      lease, ms
  ARGV[4]      1 if the topic is key-serial (skip messages whose key is in flight)
  ARGV[5]      how many due delayed messages one slot promotes per call at most
  ARGV[6]      serial topics: how deep to look into each slot's ready messages (>= count)
  ARGV[7]      the topic's generation as the client read it from the registry ("": none)
  ARGV[8]      who claims (a consumer's id; "": not said), kept in each in-flight record
  ARGV[9]      RESYNC: rebuild the index when it was last built this many ms ago or more
  ARGV[10]     how many slots of the ready index to return as the next window
  ARGV[11]     at most this many slots to ask for
  ARGV[12]     how many messages to read from a slot at a time
  ARGV[13..]   the window: the slot number of each slot in KEYS, in KEYS order

  Returns {next_due, needed, window, then the claimed messages as in claim.lua (take.lua's
  take_chosen: the shares' first delivery ids, then runs of messages that share a header)}.
  next_due: the earliest delayed due time when fewer than `count` were claimed, else -1
  (or when the slot that may hold it is outside the window: then it is asked for). needed: slots outside the window to call again with (empty when the
  claim is complete). window: the slots at the head of the index afterwards, for the next
  claim. Returns the integer NEED_SYNC (2) when the index must be rebuilt first, and when
  the topic is gone claims nothing and returns GONE_UNKNOWN or GONE_STALE.

  Flags: allow-oom, since it only moves messages already stored (into in flight) and keeps
  the small index, so that consumers can drain a Redis that is out of memory;
  allow-cross-slot-keys, since one call reads many slots of the topic.
]]
--- @include "scores"
--- @include "records"
--- @include "promote"
--- @include "group_keys"
--- @include "key_locks"
--- @include "unlocked"
--- @include "generation"
--- @include "take"
--- @include "server_clock"

local NEED_SYNC = 2

local gone = topic_gone(KEYS[1], ARGV[7])
if gone then
  return gone
end

local heads_ready, heads_delayed = KEYS[2], KEYS[3]
local clock_ms = server_ms()
local synced = tonumber(rcall("GET", KEYS[4]))
if not synced or math.abs(clock_ms - synced) >= tonumber(ARGV[9]) then
  return NEED_SYNC
end

local now = tonumber(ARGV[1])
local count = tonumber(ARGV[2])
local lease_until = now + tonumber(ARGV[3])
local serial = ARGV[4] == "1"
local promote_limit = tonumber(ARGV[5])
local scan = tonumber(ARGV[6])
local holder = holder_part(ARGV[8])
local report = tonumber(ARGV[10])
local need_max = tonumber(ARGV[11])
local first_read = math.min(tonumber(ARGV[12]), count)

-- The window: slot number -> index i in KEYS order; slots[i], the slot's group key table,
-- is built when first used (a claim opens a fraction of the slots it is passed).
local index_of = {}
for i = 1, (#KEYS - 4) / (1 + GROUP_KEY_COUNT) do
  index_of[ARGV[12 + i]] = i
end
local slots = setmetatable({}, {__index = function(built, i)
  local first = 5 + (i - 1) * (1 + GROUP_KEY_COUNT)
  local k = group_keys(first + 1)
  k.seq = KEYS[first]
  k.slot = ARGV[12 + i]
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

local function head_of(key)
  local head = rcall("ZRANGE", key, 0, 0, "WITHSCORES")
  return head[2] and tonumber(head[2])
end

-- Promotion. Every slot with a due entry, at most one per slot: bounded by the slot count.
for _, slot in ipairs(rcall("ZRANGEBYSCORE", heads_delayed, "-inf", fmt(now))) do
  local i = index_of[slot]
  if i then
    local k = slots[i]
    promote_due(k.ready, k.delayed, now, promote_limit)
    local later = head_of(k.delayed)
    if later then
      rcall("ZADD", heads_delayed, fmt(delayed_due(later)), slot)
    else
      rcall("ZREM", heads_delayed, slot)
    end
    -- lower the ready entry also when another script (stats) promoted without the index
    local best = head_of(k.ready)
    if best then
      rcall("ZADD", heads_ready, "LT", fmt(best), slot)
    end
  else
    need(slot)
  end
end

-- The merge orders by (priority, due millisecond): `ms_key` of a ready score, which drops
-- the stamp's count within the millisecond. Within a slot messages come in score order (the
-- zset's), so send order holds there; across slots, messages of one priority due in the
-- same millisecond may come in any order (docs/semantics.md, "Order"), and the merge takes
-- them from the slots it has read already before it reads more: a claim of 100 from a burst
-- of sends touches a few slots instead of a hundred (most of a claim's cost is per slot).
local function ms_key(score)
  return math.floor(score / 32)  -- exact: scores are integers below 2^53
end

-- Opened slots in a min-heap by (key, class), kept as one number, key * 4 + class (exact:
-- keys stay below 2^49): class 0 when the slot's next candidate is read (key: its ms_key),
-- class 1 when its chunk ran out and more may follow unread (key: that of the last one
-- read, a lower bound). At an equal key a read candidate comes first, then a slot to read
-- on, then the index's next slot (class 2, not opened yet). The heap is two flat arrays
-- compared inline: this loop runs a few hundred times per claim, and Lua calls cost.
local streams = {}  -- per slot index: {members, scores, pos, read, more, size, rank}
local hv, hs, heap_n = {}, {}, 0  -- heap: rank, slot index
local function sift_down(h)
  local v, i = hv[h], hs[h]
  while true do
    local l = 2 * h
    if l > heap_n then
      break
    end
    if l < heap_n and hv[l + 1] < hv[l] then
      l = l + 1
    end
    if hv[l] >= v then
      break
    end
    hv[h], hs[h] = hv[l], hs[l]
    h = l
  end
  hv[h], hs[h] = v, i
end
local function push(i, v)
  heap_n = heap_n + 1
  local h = heap_n
  while h > 1 do
    local parent = math.floor(h / 2)
    if hv[parent] <= v then
      break
    end
    hv[h], hs[h] = hv[parent], hs[parent]
    h = parent
  end
  hv[h], hs[h] = v, i
end
local function pop()
  hv[1], hs[1] = hv[heap_n], hs[heap_n]
  hv[heap_n], hs[heap_n] = nil, nil
  heap_n = heap_n - 1
  if heap_n > 0 then
    sift_down(1)
  end
end

-- Where a stream stands in the heap: its rank, or nil when it holds nothing more.
local function rank_of(s)
  local score = s.scores[s.pos]
  if score then
    return ms_key(score) * 4
  end
  if s.more then
    return ms_key(s.scores[#s.scores]) * 4 + 1
  end
  return nil
end

-- A slot's candidates: on a serial topic its unlocked heads, read once; otherwise its
-- ready zset a chunk at a time, of as many as the client expects a slot to give (count over
-- the slots the last claim took from: most slots of a big topic give a claim one or two
-- messages, a slot holding a burst gives it many). Reading with scores costs about a
-- microsecond a message, and the chunk that finds where a slot's run ends is mostly left
-- unread, so chunks do not grow.
local function read_chunk(s, k)
  local got = rcall("ZRANGE", k.ready, s.read, s.read + s.size - 1, "WITHSCORES")
  local members, scores = {}, {}
  for j = 1, #got, 2 do
    members[#members + 1] = got[j]
    scores[#scores + 1] = tonumber(got[j + 1])
  end
  if #members > 0 then
    s.members, s.scores, s.pos = members, scores, 1
  end
  s.read = s.read + #members
  s.more = #members == s.size
end
local function open(i)
  local s = {read = 0, size = first_read, pos = 1, members = {}, scores = {}}
  streams[i] = s
  if serial then
    s.more = false
    unlocked_heads(slots[i], count, scan, function(score, member)
      s.members[#s.members + 1] = member
      s.scores[#s.scores + 1] = score
    end)
  else
    read_chunk(s, slots[i])
  end
  local rank = rank_of(s)
  if rank then
    push(i, rank)
  end
end

-- The index a page at a time; nothing writes it during the merge, so ranks stay put.
local PAGE = 32  -- reading an entry costs about a microsecond: most claims need few
local entries, at, offset, index_done = {}, 1, 0, false
local function next_entry()
  if at > #entries then
    if index_done then
      return nil
    end
    entries = rcall("ZRANGE", heads_ready, offset, offset + PAGE - 1, "WITHSCORES")
    offset = offset + PAGE
    at = 1
    index_done = #entries < 2 * PAGE
    if #entries == 0 then
      return nil
    end
  end
  return entries[at], tonumber(entries[at + 1])
end

local taken = new_taken(serial)
if #needed == 0 then
  while taken.n < count do
    local slot, bound = next_entry()
    if heap_n > 0 and (not slot or hv[1] < ms_key(bound) * 4 + 2) then
      local i = hs[1]
      local s = streams[i]
      if hv[1] % 4 == 1 then
        read_chunk(s, slots[i])  -- its rank can only rise
      else
        take(taken, i, s.scores[s.pos], s.members[s.pos])
        s.pos = s.pos + 1
      end
      local rank = rank_of(s)
      if rank then
        hv[1] = rank
        sift_down(1)  -- at an equal rank it stays on top: a slot's run is taken in one go
      else
        pop()
      end
    elseif slot then
      at = at + 2
      local i = index_of[slot]
      if i then
        open(i)
      else
        -- this slot may hold a message as good: ask for it, and the next ones, and stop
        need(slot)
        while #needed < need_max do
          slot = next_entry()
          if not slot then
            break
          end
          at = at + 2
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
take_chosen(slots, taken, now, lease_until, holder, out)

-- Every opened slot's entry becomes its head now: the next candidate read, or when the
-- slot was read to the end of a chunk, the last score read (a lower bound: the next claim
-- to reach it reads it); removed when the slot's ready zset is empty.
local heads, emptied = {}, {}
for i, s in pairs(streams) do
  local head
  if serial then
    head = head_of(slots[i].ready)
  elseif s.scores[s.pos] then
    head = s.scores[s.pos]
  elseif s.more then
    head = s.scores[#s.scores]
  end
  if head then
    heads[#heads + 1] = fmt(head)
    heads[#heads + 1] = slots[i].slot
  else
    emptied[#emptied + 1] = slots[i].slot
  end
end
if #heads > 0 then
  rcall("ZADD", heads_ready, unpack(heads))
end
if #emptied > 0 then
  rcall("ZREM", heads_ready, unpack(emptied))
end

-- The next due time, exact: an entry of a slot in the window is checked against the slot
-- (an optimistic one is fixed, and the next looked at); one outside the window is asked for.
if taken.n < count and #needed == 0 then
  local checked = {}
  while true do
    local head = rcall("ZRANGE", heads_delayed, 0, 0, "WITHSCORES")
    local slot, due = head[1], tonumber(head[2])
    if not slot or checked[slot] then
      out[1] = due or -1
      break
    end
    local i = index_of[slot]
    if not i then
      need(slot)
      break
    end
    checked[slot] = true
    local later = head_of(slots[i].delayed)
    if later then
      rcall("ZADD", heads_delayed, fmt(delayed_due(later)), slot)
    else
      rcall("ZREM", heads_delayed, slot)
    end
  end
end
local window = out[3]
for _, slot in ipairs(rcall("ZRANGE", heads_ready, 0, report - 1)) do
  window[#window + 1] = tonumber(slot)
end
for _, slot in ipairs(rcall("ZRANGE", heads_delayed, 0, 3)) do
  window[#window + 1] = tonumber(slot)
end
return out
