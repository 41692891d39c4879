--[[
  Versions (docs/semantics.md, "Versions"): on a topic merging by key a send may carry a
  version, and a slot remembers, for the whole topic (every group shares its producers'
  order), the highest version seen per identity: `versions` (hash identity -> version) and
  when it was last sent (`versions_seen`, zset identity -> epoch ms). A message whose
  version is lower than its identity's highest is outdated: dropped before any group sees
  it. An equal or higher one is kept, and recorded. A message sent without a version is
  neither checked nor recorded.

  An identity is remembered at least `retention` ms after its last versioned send, and
  while a value of it is pending in a group (then it is kept another `retention`): each
  call that carries versions first forgets, oldest first, at most 2 entries per versioned
  message it carries (at least FORGET_AT_LEAST) whose retention has passed, so the work
  stays bounded and keeps up with the sends, and an identity sent again after its
  retention is forgotten before it is checked.

  A send's messages travel (enqueue.lua's ARGV, a transaction's halves) as runs of messages
  sharing a priority and a due time, each: priority, due, n, then n members; or, a run
  carrying versions, priority, due, -n, then the n versions, then the n members. A call
  whose runs may carry them says so in its by_key argument, "v<retention ms>" instead of
  "1", and passes the slot's versions and versions_seen as the last KEYS before the trace
  log (or last).

  Versions.read_runs(source, first_arg, by_key) reads the runs from source[first_arg..]:
  returns the runs, each {priority, due, first, last, offset, versioned} (its members at
  source[first..last], the message numbers offset + 1.. of the batch; versioned: it carries
  versions, at source[first - n..last - n]), what names each message (source itself, or
  merging by key a table at the same places: its identity, member.lua's member_key) and
  how many messages there are.

  Versions.open(by_key, last_key) -> the slot's versions `v` (nil when by_key is not
  "v<ms>"), and where the groups' keys end. v:keep_fresh(runs, source, names, now) drops
  the outdated messages from `runs` (enqueue_batch.lua's: {priority, due, first, last,
  offset, versioned}), splitting a run around them; returns the runs kept and the message
  numbers dropped (nil when none; their identities in its `names`), which the caller
  answers as Versions.OUTDATED and counts in each group with
  Versions.count_outdated(k, dropped) (as `outdated`, traced as such).
  v:forget(now, runs, first_key, last_key, stride), before keep_fresh, forgets what the
  retention has passed over (the groups' keys at first_key..last_key).

  Provides: Versions.  Needs: rcall, KEYS, and the
  includes below.
]]
--- @include "group_keys"
--- @include "member"
--- @include "trace"

-- One table, its functions as fields: a Functions library's main chunk has a bound on
-- its local variables.
local Versions = {
  FORGET_AT_LEAST = 10,
  OUTDATED = 2,  -- what a send script answers for an outdated message
}
Versions.__index = Versions

function Versions.open(by_key, last_key)
  if string.byte(by_key, 1) ~= 118 then  -- "v"
    return nil, last_key
  end
  return setmetatable({hash = KEYS[last_key - 1], seen = KEYS[last_key],
                       retention = tonumber(string.sub(by_key, 2)), highest = {}},
                Versions),
    last_key - 2
end

-- Whether `identity`'s version `text` (a decimal string: stored as sent, exact up to 2^53)
-- is not lower than its highest; if so it is recorded.
function Versions:fresh(identity, text, now)
  local v = self
  local version = tonumber(text)
  local highest = v.highest[identity]
  if highest == nil then
    highest = tonumber(rcall("HGET", v.hash, identity) or -1)
  end
  if version < highest then
    return false
  end
  if version > highest then
    rcall("HSET", v.hash, identity, text)
    v.highest[identity] = version
  end
  rcall("ZADD", v.seen, now, identity)
  return true
end

function Versions:keep_fresh(runs, source, names, now)
  local v = self
  local kept, dropped = {}, nil
  local stamp = string.format("%d", now)
  for _, run in ipairs(runs) do
    if not run[6] then
      kept[#kept + 1] = run
    else
      local n = run[4] - run[3] + 1
      local from = run[3]
      for at = run[3], run[4] do
        if not v:fresh(names[at], source[at - n], stamp) then
          if at > from then
            kept[#kept + 1] = {run[1], run[2], from, at - 1, run[5] + from - run[3]}
          end
          dropped = dropped or {names = {}}
          dropped[#dropped + 1] = run[5] + at - run[3] + 1
          dropped.names[#dropped] = names[at]
          from = at + 1
        end
      end
      if from <= run[4] then
        kept[#kept + 1] = {run[1], run[2], from, run[4], run[5] + from - run[3]}
      end
    end
  end
  return kept, dropped
end

-- The messages keep_fresh dropped, counted (and traced) in k's group.
function Versions.count_outdated(k, dropped)
  rcall("HINCRBY", k.counters, "outdated", #dropped)
  if k.trace then
    for _, identity in ipairs(dropped.names) do
      trace_message(k, "outdated", identity, nil)
    end
  end
end

function Versions:forget(now, runs, first_key, last_key, stride)
  local v = self
  local carried = 0
  for _, run in ipairs(runs) do
    if run[6] then
      carried = carried + run[4] - run[3] + 1
    end
  end
  if carried == 0 then
    return
  end
  local limit = math.max(v.FORGET_AT_LEAST, 2 * carried)
  local old = rcall("ZRANGEBYSCORE", v.seen, "-inf", string.format("%d", now - v.retention),
    "LIMIT", 0, limit)
  if #old == 0 then
    return
  end
  local stamp = string.format("%d", now)
  for _, identity in ipairs(old) do
    local pending = false
    for first = first_key, last_key, stride do
      if rcall("HEXISTS", group_keys(first).values, identity) == 1 then
        pending = true
        break
      end
    end
    if pending then
      rcall("ZADD", v.seen, stamp, identity)
    else
      rcall("ZREM", v.seen, identity)
      rcall("HDEL", v.hash, identity)
    end
  end
end

function Versions.read_runs(source, first_arg, by_key)
  local runs = {}
  local total = 0
  local i = first_arg
  local names = source
  if by_key then
    names = {}
  end
  while i <= #source do
    local n = tonumber(source[i + 2])
    local from, versioned = i + 3, n < 0
    if versioned then
      n = -n
      from = from + n
    end
    runs[#runs + 1] = {tonumber(source[i]), tonumber(source[i + 1]), from, from + n - 1, total,
      versioned}
    if by_key then
      for at = from, from + n - 1 do
        names[at] = member_key(source[at])
      end
    end
    total = total + n
    i = from + n
  end
  return runs, names, total
end
