--[[
  Writing a claim's choice: each chosen message leaves ready and goes into in flight with its
  holder (and, on serial topics, its key lock), and each slot's share, a range of delivery
  ids, gets one lease (scores.lua, "leases"), with a few commands per slot instead of five per
  message (claim.lua and claim_heads.lua choose, this writes).

  new_taken(serial, by_key, supersede) makes the record of a claim's choice, in claim
  order, as columns (a table per message would cost an allocation per message): taken.n
  messages, the nth from slot index taken.slot[n], with ready score taken.score[n] and
  member taken.member[n].
  `by_key`: the topic merges by key, so a member is a message's identity and the message
  itself is in the group's `values` (pending.lua), which take_chosen reads and removes.
  `supersede`: the group supersedes, so each delivery is noted under its identity in the
  group's `running` (running.lua).
  take(taken, i, score, member) adds the next candidate in claim order, unless on a serial
  topic this call took a message of its key already, or it waits (below); it returns
  whether it took it (one that waits sets `taken.waited`: shares are then removed by member,
  not as prefixes).
  taken.waits(k, identity), only in a superseding group of a topic merging by key, whether
  an older delivery of the identity is in flight (its `running` entry names it: running.lua),
  so that its newer value waits, pending and merging, and the last handling of a key to
  complete is of its newest value. At most one candidate waits per delivery in flight.
  `taken.slots` (new_taken's last argument): the slots' key tables, by slot index.

  take_chosen(slots, taken, now, lease_until, holder, out): `slots` the group key tables
  (with `seq`), `taken` the choice (on a non-serial topic each slot's share is a prefix of
  its ready zset: removed by rank), `holder` the text from holder_part. Appends to `out`
  the shares, then the messages in claim order as runs that share a header:
    number of shares, then per share: slot index, its first delivery id;
    per run: its length n, priority, attempts (this one included), due_ms, then per
    message: slot index, member.
  A slot's messages have its share's ids in the order they come (the first, the next...):
  two reply fields a message instead of six, which Redis converts and the client parses.

  Provides: new_taken, take, take_chosen.  Needs: rcall, and the includes below.
]]
--- @include "scores"
--- @include "member"
--- @include "records"
--- @include "bulk"
--- @include "leases"
--- @include "running"

local function new_taken(serial, by_key, supersede, slots)
  local taken = {n = 0, slot = {}, score = {}, member = {}, serial = serial, keys = {},
    by_key = by_key, supersede = supersede, slots = slots}
  -- (on a serial topic a key lock already keeps an identity's deliveries apart; a field,
  -- not a local of its own: the library's main function is at Lua's 200 locals)
  if supersede and by_key and not serial then
    local entries = {}  -- identity -> its entry as read here (false: none), for note_claimed
    taken.entries = entries
    taken.waits = function(k, identity)
      local entry = rcall("HGET", k.running, "=" .. identity)
      entries[identity] = entry
      local id = entry_of(entry)
      return id ~= nil and rcall("HEXISTS", k.inflight, id) == 1
    end
  end
  return taken
end

local function take(taken, i, score, member)
  -- (merging by key, a member is the identity: the key itself)
  local key = taken.serial and (taken.by_key and member or member_key(member))
  if key then
    if taken.keys[key] then
      return false
    end
    taken.keys[key] = true
  end
  if taken.waits and taken.waits(taken.slots[i], member) then
    taken.waited = true  -- a share is no longer a prefix of its slot's ready zset
    return false
  end
  local n = taken.n + 1
  taken.n, taken.slot[n], taken.score[n], taken.member[n] = n, i, score, member
  return true
end

local function take_chosen(slots, taken, now, lease_until, holder, out)
  local serial, by_key = taken.serial, taken.by_key
  local taken_slot, taken_score, taken_member = taken.slot, taken.score, taken.member
  local chosen, order = {}, {}  -- per slot index: its members, in claim order; the indexes
  for t = 1, taken.n do
    local i = taken_slot[t]
    local members = chosen[i]
    if not members then
      members = {}
      chosen[i] = members
      order[#order + 1] = i
    end
    members[#members + 1] = taken_member[t]
  end
  -- Attempt counts exist only for messages that ran before: one EXISTS over every share's
  -- slot says whether any of them must be read (most claims: none).
  local counted = {}
  for n, i in ipairs(order) do
    counted[n] = slots[i].attempts
  end
  local any_counted = #order > 0 and rcall("EXISTS", unpack(counted)) > 0
  local id_text, next_id, attempts_of = {}, {}, {}  -- per slot: its share's ids as text, ...
  local records, locks = {}, {}  -- per slot: HSET arguments
  local stored = {}  -- merging by key, per slot: identity -> the message as stored
  local leases = {}  -- per slot: the lease member of its range of delivery ids
  local o = #out + 1  -- the reply: the shares first (slot index, first delivery id)
  out[o] = #order
  for _, i in ipairs(order) do
    local members = chosen[i]
    records[i], locks[i] = {}, {}
    local k = slots[i]
    if serial or taken.waited then
      bulk("ZREM", k.ready, members)
    else
      -- the merge took a prefix of this slot's ready zset: drop it by rank, without sending
      -- the members back into Redis
      rcall("ZREMRANGEBYRANK", k.ready, 0, #members - 1)
    end
    if by_key then
      local values = bulk("HMGET", k.values, members)
      local of = {}
      for j, member in ipairs(members) do
        -- (a member pending without a value cannot be sent by a client: it is claimed as
        -- its identity, for the client to decode or dead-letter)
        of[member] = values[j] or member
      end
      stored[i] = of
      bulk("HDEL", k.values, members)
    end
    if any_counted and rcall("EXISTS", k.attempts) == 1 then
      local counts = bulk("HMGET", k.attempts, members)
      local earlier = {}
      for j, member in ipairs(members) do
        earlier[member] = tonumber(counts[j])
      end
      attempts_of[i] = earlier
      bulk("HDEL", k.attempts, members)
    end
    -- one id more than the share needs, left unused: two shares are then never one run of
    -- ids, so an ack that takes in a share whole names its lease whatever else it settles
    -- Ids never repeat: at least this millisecond's floor (scores.lua), so a counter that
    -- went back with a failover or a lost append-only tail starts above what it handed out
    local first = math.max((tonumber(rcall("GET", k.seq)) or 0), first_id_floor(now)) + 1
    rcall("SET", k.seq, fmt(first + #members))
    local last = first + #members - 1
    id_text[i], next_id[i] = id_texts(first, last), 1  -- spelled a hundred at a time
    if taken.supersede then
      note_claimed(k, members, id_text[i], taken.entries)
    end
    leases[i] = {fmt(lease_score(lease_until, first)), lease_member(first, last)}
    out[o + 1], out[o + 2] = i, first
    o = o + 2
  end

  -- Per message: its id, its record and two reply fields. The messages of a claim mostly
  -- share a priority, a due millisecond and an attempt count, so a record's header (and a
  -- run in the reply) is made once per run of them: `score - score % SUB` is the priority
  -- and due millisecond.
  local run_base, run_attempts, p, due, header
  local run_at, run_n = nil, 0  -- where the current run's length goes in `out`; the length
  local sizes = {}  -- per slot: the length of its records table
  for t = 1, taken.n do
    local i, score, member = taken_slot[t], taken_score[t], taken_member[t]
    local identity = member
    if by_key then
      member = stored[i][identity]
    end
    local j = next_id[i]
    next_id[i] = j + 1
    local id = id_text[i][j]
    local attempts = 1
    local earlier = attempts_of[i]
    if earlier then
      attempts = (earlier[identity] or 0) + 1
    end
    local base = score - score % SUB
    if base ~= run_base or attempts ~= run_attempts then
      run_base, run_attempts = base, attempts
      p = ready_priority(score)
      due = math.min(stamp_due(ready_stamp(score)), now)
      header = inflight_header(p, attempts, due, holder)
      if run_at then
        out[run_at] = run_n
      end
      run_at, run_n = o + 1, 0  -- its length is written when the run ends (0 until then)
      out[o + 1], out[o + 2], out[o + 3], out[o + 4] = 0, p, attempts, due
      o = o + 4
    end
    run_n = run_n + 1
    local r, size = records[i], (sizes[i] or 0) + 2
    sizes[i] = size
    r[size - 1], r[size] = id, header .. member
    if serial then
      local lk = locks[i]
      lk[#lk + 1] = by_key and identity or member_key(member)
      lk[#lk + 1] = id
    end
    out[o + 1], out[o + 2] = i, member
    o = o + 2
  end
  if run_at then
    out[run_at] = run_n
  end
  for _, i in ipairs(order) do
    local k = slots[i]
    bulk("HSET", k.inflight, records[i])
    rcall("ZADD", k.leases, leases[i][1], leases[i][2])
    if serial then
      bulk("HSET", k.locks, locks[i])
    end
  end
end
