#!lua flags=allow-oom,allow-cross-slot-keys
--[[
  Claim up to `count` due messages of one group, highest priority first, then FIFO, moving
  each into in flight with a lease. On a single node the client passes every slot of the
  topic, which makes priority strict across slots; on a cluster, one slot per call, with
  the count and the lowest priority (ARGV[15]) chosen from the slots' heads (head.lua).

  KEYS[1]      the generation of the first slot claimed from (includes/generation.lua)
  KEYS[2..]    per slot, 12 keys: the slot's delivery-id counter, then the 11 group keys
               (with the trace on, 13: then the slot's trace log, includes/trace.lua);
               on a single node, then the group's 5 limit keys (includes/limit_claim.lua)
  ARGV[1..14]  the claim's arguments, named in includes/claim_args.lua: now, max_count,
               lease_ms, serial, promote_limit, scan, generation, holder (kept in each
               in-flight record), limit_group, limit_waiter, limit_wait_ms (the group's
               limits: a single node passes them with the 5 limit keys last in KEYS and
               every slot of the topic in slot order; a cluster passes limit_group "" and
               no such keys), trace, by_key, supersede
  ARGV[15]     lowest: optional, the lowest priority to claim (a cluster claim's bound to
               the bands it chose from the slots' heads)

  Returns {next_due, then the claimed messages as take.lua's take_chosen writes them: the
  number of slots claimed from, each one's slot index (1-based, in KEYS order) and first
  delivery id, then runs of messages that share priority, attempts (including this one)
  and due_ms: the run's length, those three, and per message its slot index and member,
  then, when the limit keys were passed, what limit_claim.lua's limit_close appends}.
  next_due is the earliest delayed due time when fewer than `count` were claimed (-1 if
  none or not asked).
  When the topic is gone, claims nothing and returns the integer GONE_UNKNOWN or GONE_STALE:
  checking the first slot is enough, as delete_topic removes the slots' generations in
  slot order before any data, and a single-node call starts at slot 0.

  Flags: allow-oom, since it only moves messages already stored (into in flight), so that
  consumers can drain a Redis that is out of memory; allow-cross-slot-keys, since on a
  single node one call reads every slot of the topic (strict priority topic-wide; on a
  cluster the client calls once per slot).
]]
--- @include "scores"
--- @include "pending"
--- @include "group_keys"
--- @include "key_locks"
--- @include "unlocked"
--- @include "records"
--- @include "claim_args"
--- @include "take"
--- @include "limit_claim"

local gone, now, max_count, lease_ms, serial, promote_limit, scan, generation, holder,
  limit_group, limit_waiter, limit_wait_ms, trace, by_key, supersede = claim_args(KEYS[1])
if gone then
  return gone
end
local lease_until = now + lease_ms
local lowest = tonumber(ARGV[15])
local limit, count = limit_open(now, max_count, limit_group, limit_waiter, limit_wait_ms)
local function slot_of(i) return i - 1 end  -- with limit keys: every slot, in order
if count == 0 then
  return limit_close(limit, new_taken(serial, by_key, supersede), {-1, 0}, 2, slot_of, lease_until)
end

local slots, delayed = {}, {}
for first = 2, #KEYS - limit_key_count(limit_group), claim_stride(trace) do
  local k = group_keys(first + 1)
  k.seq = KEYS[first]
  k.by_key = by_key
  attach_trace(k, claim_trace(trace, first))
  slots[#slots + 1] = k
  delayed[#delayed + 1] = k.delayed
end
-- One EXISTS over every slot's delayed zset: most topics have none, and then no slot needs
-- a call to promote or to find the next due time.
local any_delayed = rcall("EXISTS", unpack(delayed)) > 0
if any_delayed then
  for _, k in ipairs(slots) do
    promote_due(k.ready, k.delayed, now, promote_limit, k)
  end
end

-- The messages to claim, best first, across the slots, into `taken` (take.lua): on a serial
-- topic from the sorted unlocked heads; otherwise by merging the slots' ready zsets, read a
-- chunk at a time (nothing is removed until the choice is made, so a refill reads on from
-- where it was).
local taken = new_taken(serial, by_key, supersede, slots)
if serial then
  local candidates = {}
  for i, k in ipairs(slots) do
    unlocked_heads(k, count, scan, function(score, member)
      candidates[#candidates + 1] = {score, i, member}
    end)
  end
  table.sort(candidates, function(a, b) return a[1] < b[1] end)
  for _, c in ipairs(candidates) do
    if taken.n >= count or (lowest and ready_priority(c[1]) < lowest) then
      break
    end
    take(taken, c[2], c[1], c[3])
  end
else
  -- Each slot's even share first, then more in steps that start small and double where a
  -- slot's share runs out, never more than the claim still wants (all of it when no other
  -- slot has any left): reading an element (its score printed by Redis, parsed back by Lua)
  -- costs about as much as a call, so a wide margin read up front cost more than the
  -- refills it saved.
  local n_slots = #slots
  local wanted = count  -- candidates still to hand out (all taken, but those that wait)
  local chunk = math.max(1, math.min(math.ceil(count / n_slots) + 1, count))
  local step = math.max(2, math.ceil(chunk / 4))
  local members, scores, pos, more, read, sizes = {}, {}, {}, {}, {}, {}
  local head = {}  -- per slot: the score of its next candidate, math.huge when none is left
  local function refill(i)
    local from = read[i] or 0
    local size = sizes[i] or chunk
    sizes[i] = from == 0 and step or 2 * size
    if from > 0 then
      local alone = true
      for s = 1, n_slots do
        if s ~= i and head[s] ~= math.huge then
          alone = false
          break
        end
      end
      size = alone and wanted or math.min(size, wanted)
    end
    local got = rcall("ZRANGE", slots[i].ready, from, from + size - 1, "WITHSCORES")
    read[i] = from + #got / 2
    local m, sc = {}, {}
    for j = 2, #got, 2 do
      local e = j / 2
      m[e], sc[e] = got[j - 1], tonumber(got[j])
    end
    members[i], scores[i], pos[i] = m, sc, 1
    more[i] = #got == 2 * size
    head[i] = sc[1] or math.huge
  end
  for i = 1, n_slots do
    refill(i)
  end
  -- The merge, written out in the loop (calls per message cost 2.3 k instructions a message):
  -- each message is taken (no key rule here), so it writes taken's columns directly.
  local taken_slot, taken_score, taken_member = taken.slot, taken.score, taken.member
  local n = 0
  while n < count do
    local best, best_score = nil, math.huge
    for i = 1, n_slots do
      if head[i] < best_score then
        best, best_score = i, head[i]
      end
    end
    if not best or (lowest and ready_priority(best_score) < lowest) then
      break
    end
    local j = pos[best]
    local member = members[best][j]
    if taken.waits and taken.waits(slots[best], member) then
      taken.waited = true  -- (take.lua: the shares are no longer prefixes)
    else
      n = n + 1
      taken_slot[n], taken_score[n], taken_member[n] = best, best_score, member
      wanted = wanted - 1
    end
    pos[best] = j + 1
    local following = scores[best][j + 1]
    if following then
      head[best] = following
    elseif more[best] and wanted > 0 then
      refill(best)
    else
      head[best] = math.huge
    end
  end
  taken.n = n
end

-- Then write each slot's share with a few commands (not five per message).
local out = {-1}
take_chosen(slots, taken, now, lease_until, holder_part(holder), out)
local claimed = taken.n
if trace ~= "" then
  trace_taken(slots, out, 2, holder, taken.score, by_key and taken.member)
  for _, k in ipairs(slots) do
    trace_save(k.trace)
  end
end

if claimed < count and any_delayed then
  for _, k in ipairs(slots) do
    local head = rcall("ZRANGE", k.delayed, 0, 0, "WITHSCORES")
    if head[2] then
      local due = delayed_due(tonumber(head[2]))
      if out[1] == -1 or due < out[1] then
        out[1] = due
      end
    end
  end
end
return limit_close(limit, taken, out, 2, slot_of, lease_until)
