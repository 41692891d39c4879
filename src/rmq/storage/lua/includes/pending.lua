--[[
  Putting a message into pending with the merge rules of SPEC §2: if the member is already
  pending (ready or delayed) nothing new is stored; the pending message keeps the earliest
  due time and the highest priority of the two.

  `stamp` is the ready stamp to use if the message is ready now; nil asks the slot clock
  for the next one (send order). Returns true when the message merged, and then the ready
  score it merged into as Redis gave it (nil for a delayed message): the trace names the
  merge by it (trace.lua).

  Every message put into ready or delayed is noted in the slot's heads index when the
  group's key table has one (heads.lua): `finish` writes the index. When the key table has a
  tracer (trace.lua), a held delayed message that a merge makes ready is traced as promoted,
  and a ready message whose score a merge changes as rescored.

  Merging by key (a topic whose `merge` setting is "key"): a pending message is its
  identity (its key, else its body: member.lua's member_key) in ready or delayed, merged by
  the same rules, and the group's `values` hash holds the message as stored under it; a
  field exists exactly while its identity is pending. put_value writes a message's value
  after put_pending placed its identity; withdraw_pending takes an identity out of pending.

  Provides: open_clock, put_pending, put_pending_run, put_value, withdraw_pending, finish,
  and promote_due (from promote.lua).  Needs: rcall, CALL (what
  one call keeps: whether to wake consumers), and the includes below.
]]
--- @include "scores"
--- @include "bulk"
--- @include "promote"
--- @include "heads"
--- @include "trace"

-- The slot clock hands out strictly increasing stamps so that sends in one millisecond
-- keep their order; it reads and writes the clock key once per script call.
local Clock = {}
Clock.__index = Clock

local function open_clock(key, now)
  return setmetatable({key = key, last = tonumber(rcall("GET", key) or 0),
    floor = due_stamp(now), dirty = false}, Clock)
end

function Clock:next()
  local s = math.max(self.floor, self.last + 1)
  self.last = s
  self.dirty = true
  return s
end

function Clock:save()
  if self.dirty then
    rcall("SET", self.key, fmt(self.last))
  end
end

-- Set when a sleeping consumer has something new to do: work became ready where there was
-- none, or the next due time moved earlier. Scripts publish on the wake channel once if set.
-- What each group looked like before this script's first change is read once and kept on
-- its key table `k`, so the check costs no extra command per message.

local function add_ready(k, member, score)
  if k.ready_was_empty == nil then
    k.ready_was_empty = rcall("EXISTS", k.ready) == 0
  end
  rcall("ZADD", k.ready, fmt(score), member)
  note_ready(k, score)
  CALL.woke = CALL.woke or k.ready_was_empty
end

local function add_delayed(k, member, score)
  if k.delayed_head == nil then
    local head = rcall("ZRANGE", k.delayed, 0, 0, "WITHSCORES")
    k.delayed_head = head[2] and tonumber(head[2]) or false
  end
  rcall("ZADD", k.delayed, fmt(score), member)
  note_delayed(k, delayed_due(score))
  k.has_delayed = true
  CALL.woke = CALL.woke or not k.delayed_head or score < k.delayed_head
end

-- Most sends are immediate into a topic with nothing delayed: skip that lookup then.
local function delayed_score_of(k, member)
  if k.has_delayed == nil then
    k.has_delayed = rcall("EXISTS", k.delayed) == 1
  end
  return k.has_delayed and rcall("ZSCORE", k.delayed, member)
end

local function put_pending(k, member, priority, due, now, clock, stamp)
  local held = rcall("ZSCORE", k.ready, member)
  if held then
    local score = tonumber(held)
    local held_p, held_stamp = ready_priority(score), ready_stamp(score)
    local p, s = math.max(priority, held_p), held_stamp
    if stamp and due <= now and stamp < held_stamp then
      s = stamp  -- a delivery given back was due before this duplicate: it keeps its place
    end
    if p ~= held_p or s ~= held_stamp then
      local raised = ready_score(p, s)
      rcall("ZADD", k.ready, fmt(raised), member)
      note_ready(k, raised)
      if k.trace then
        trace_rescored(k, member, held)
      end
    end
    return true, held
  end
  local score = delayed_score_of(k, member)
  if score then
    score = tonumber(score)
    local held_due = delayed_due(score)
    local p = math.max(priority, delayed_priority(score))
    if math.min(due, held_due) <= now then
      -- Whichever of the two is due first decides its place: the held message may have
      -- fallen due already (not promoted yet), earlier than this send.
      rcall("ZREM", k.delayed, member)
      if held_due <= due then
        stamp = due_stamp(held_due)
      end
      add_ready(k, member, ready_score(p, stamp or clock:next()))
      if k.trace then
        trace_message(k, "promoted", member)
      end
    elseif due < held_due or p ~= delayed_priority(score) then
      add_delayed(k, member, delayed_score(math.min(due, held_due), p))
    end
    return true
  end
  if due <= now then
    add_ready(k, member, ready_score(priority, stamp or clock:next()))
  else
    add_delayed(k, member, delayed_score(due, priority))
  end
  return false
end

-- New sends of one priority and due time, source[first..last] in send order: the same as
-- put_pending on each in turn, with fewer commands. One ZMSCORE reads where every member is;
-- members pending nowhere are written with one ZADD per zset, and a member already ready at
-- an equal or higher priority merges with no write at all (the founding case's duplicates).
-- Everything else (a duplicate within the batch, a member in delayed, a priority raise) goes
-- through put_pending after the buffered adds are written, so it sees the state it would
-- have seen one send at a time. Calls on_send(n, merged, held) for the n-th member, `held`
-- as put_pending returns it. `accepts`, when given, is the group's filter: accepts(i) says
-- whether source[i] is for this group; the members it rejects are left out (on_send is not
-- called for them). `source`: the table the members are in (enqueue.lua's ARGV, or a
-- commit's half messages).
local function put_pending_run(k, first, last, priority, due, now, clock, on_send, accepts,
                               source)
  local members, positions = {}, nil
  if accepts then
    positions = {}
    for i = first, last do
      if accepts(i) then
        members[#members + 1] = source[i]
        positions[#members] = i - first + 1
      end
    end
    local report = on_send
    on_send = function(n, merged, held) report(positions[n], merged, held) end
  else
    for i = first, last do
      members[#members + 1] = source[i]
    end
  end
  if #members == 0 then
    return
  end
  local in_ready = bulk("ZMSCORE", k.ready, members)
  if k.has_delayed == nil then
    k.has_delayed = rcall("EXISTS", k.delayed) == 1
  end
  local in_delayed = k.has_delayed and bulk("ZMSCORE", k.delayed, members) or {}
  local ready_now = due <= now
  local delayed_at = delayed_score(due, priority)
  local fresh, seen, fresh_low = {}, {}, nil
  local function write_fresh()
    if #fresh == 0 then
      return
    end
    if ready_now then
      if k.ready_was_empty == nil then
        k.ready_was_empty = rcall("EXISTS", k.ready) == 0
      end
      bulk("ZADD", k.ready, fresh)
      note_ready(k, fresh_low)  -- stamps rise in send order: the first is the lowest
      CALL.woke = CALL.woke or k.ready_was_empty
    else
      add_delayed(k, fresh[2], delayed_at)  -- one score for all: the first decides a wake-up
      bulk("ZADD", k.delayed, fresh)
    end
    fresh, fresh_low = {}, nil
  end
  for n, member in ipairs(members) do
    local held = in_ready[n]
    if not (seen[member] or in_delayed[n] or held) then
      local score = ready_now and ready_score(priority, clock:next()) or delayed_at
      fresh_low = fresh_low or score
      fresh[#fresh + 1] = fmt(score)
      fresh[#fresh + 1] = member
      on_send(n, false)
    elseif held and not seen[member] and priority <= ready_priority(tonumber(held)) then
      on_send(n, true, held)
    else
      write_fresh()
      on_send(n, put_pending(k, member, priority, due, now, clock, nil))
    end
    seen[member] = true
  end
  write_fresh()
end

-- Merging by key, after put_pending placed `identity` (and said whether it `merged`): a
-- send's value always replaces the pending one (`newest`: the last value wins); a message
-- put back (a retry, a release, a requeued dead letter) keeps a pending one, which a send
-- made since it was claimed: newer.
local function put_value(k, identity, stored, merged, newest)
  if newest or not merged then
    rcall("HSET", k.values, identity, stored)
  end
end

-- Merging by key: `identity` leaves k's group's pending (a newer value its filter rejects
-- replaces it with nothing). True if it was pending.
local function withdraw_pending(k, identity)
  if rcall("HDEL", k.values, identity) == 0 then
    return false
  end
  rcall("ZREM", k.ready, identity)
  rcall("ZREM", k.delayed, identity)
  rcall("HDEL", k.attempts, identity)
  return true
end

-- The end of every script that puts messages into pending: keep the slot clock, and wake
-- sleeping consumers once if there is something new for them.
local function finish(clock, channel)
  clock:save()
  save_heads()
  if CALL.woke then
    rcall("PUBLISH", channel, "1")
  end
end
