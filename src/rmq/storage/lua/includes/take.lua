--[[
  Writing a claim's choice: each chosen message leaves ready and goes into in flight with its
  holder (and, on serial topics, its key lock), and each slot's share, a range of delivery
  ids, gets one lease (scores.lua, "leases"), with a few commands per slot instead of five per
  message (claim.lua and claim_heads.lua choose, this writes).

  new_taken(serial) makes the record of a claim's choice, in claim order, as columns (a
  table per message would cost an allocation per message): taken.n messages, the nth from
  slot index taken.slot[n], with ready score taken.score[n] and member taken.member[n].
  take(taken, i, score, member) adds the next candidate in claim order, unless on a serial
  topic this call took a message of its key already.

  take_chosen(slots, taken, now, lease_until, holder, out): `slots` the group key tables
  (with `seq`), `taken` the choice (on a non-serial topic each slot's share is a prefix of
  its ready zset: removed by rank), `holder` the text from holder_part. Appends to `out`,
  per message: slot index, delivery id, member, priority, attempts (this one included),
  due_ms.

  Provides: new_taken, take, take_chosen.  Needs: rcall, and the includes below.
]]
--- @include "scores"
--- @include "member"
--- @include "records"
--- @include "bulk"
--- @include "leases"

local function new_taken(serial)
  return {n = 0, slot = {}, score = {}, member = {}, serial = serial, keys = {}}
end

local function take(taken, i, score, member)
  local key = taken.serial and member_key(member)
  if key then
    if taken.keys[key] then
      return
    end
    taken.keys[key] = true
  end
  local n = taken.n + 1
  taken.n, taken.slot[n], taken.score[n], taken.member[n] = n, i, score, member
end

local function take_chosen(slots, taken, now, lease_until, holder, out)
  local serial = taken.serial
  local taken_slot, taken_score, taken_member = taken.slot, taken.score, taken.member
  local chosen = {}  -- per slot index: its members, in claim order
  for t = 1, taken.n do
    local i = taken_slot[t]
    local members = chosen[i]
    if not members then
      members = {}
      chosen[i] = members
    end
    members[#members + 1] = taken_member[t]
  end
  local ids, attempts_of = {}, {}  -- per slot: next delivery id; member -> earlier attempts
  local records, locks = {}, {}  -- per slot: HSET arguments
  local leases = {}  -- per slot: the lease member of its range of delivery ids
  for i, members in pairs(chosen) do
    records[i], locks[i] = {}, {}
    local k = slots[i]
    if serial then
      bulk("ZREM", k.ready, members)
    else
      -- the merge took a prefix of this slot's ready zset: drop it by rank, without sending
      -- the members back into Redis
      rcall("ZREMRANGEBYRANK", k.ready, 0, #members - 1)
    end
    attempts_of[i] = {}
    if rcall("EXISTS", k.attempts) == 1 then  -- only messages that ran before have a count
      local counts = bulk("HMGET", k.attempts, members)
      for j, member in ipairs(members) do
        attempts_of[i][member] = tonumber(counts[j])
      end
      bulk("HDEL", k.attempts, members)
    end
    -- one id more than the share needs, left unused: two shares are then never one run of
    -- ids, so an ack that takes in a share whole names its lease whatever else it settles
    local first = rcall("INCRBY", k.seq, #members + 1) - #members
    ids[i] = first
    leases[i] = {fmt(lease_score(lease_until, first)),
      lease_member(first, first + #members - 1)}
  end

  local o = #out
  for t = 1, taken.n do
    local i, score, member = taken_slot[t], taken_score[t], taken_member[t]
    local n = ids[i]
    ids[i] = n + 1
    local id = string.format("%d", n)  -- once, not each time Redis would turn it into text
    local attempts = (attempts_of[i][member] or 0) + 1
    local p = ready_priority(score)
    local due = math.min(stamp_due(ready_stamp(score)), now)
    local r = records[i]
    r[#r + 1] = id
    r[#r + 1] = inflight_record(p, attempts, due, holder, member)
    if serial then
      local lk = locks[i]
      lk[#lk + 1] = member_key(member)
      lk[#lk + 1] = id
    end
    out[o + 1], out[o + 2], out[o + 3], out[o + 4], out[o + 5], out[o + 6] =
      i, id, member, p, attempts, due
    o = o + 6
  end
  for i in pairs(chosen) do
    local k = slots[i]
    bulk("HSET", k.inflight, records[i])
    rcall("ZADD", k.leases, leases[i][1], leases[i][2])
    if serial then
      bulk("HSET", k.locks, locks[i])
    end
  end
end
