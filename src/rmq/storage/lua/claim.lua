--[[
  Claim up to `count` due messages of one group, highest priority first, then FIFO, moving
  each into in flight with a lease. On a single node the client passes every slot of the
  topic, which makes priority strict across slots; on a cluster, one slot per call.

  KEYS         per slot, 10 keys: the slot's delivery-id counter, then the 9 group keys
  ARGV[1]      now, epoch ms
  ARGV[2]      count
  ARGV[3]      lease, ms
  ARGV[4]      1 if the topic is key-serial (skip messages whose key is in flight)
  ARGV[5]      how many due delayed messages one slot promotes per call at most
  ARGV[6]      serial topics: how deep to look into each slot's ready messages for keys
               that are not in flight (>= count)

  Returns {next_due, then per claimed message: slot index (1-based, in KEYS order),
  delivery id, member, priority, attempts (including this one), due_ms}. next_due is the
  earliest delayed due time when fewer than `count` were claimed (-1 if none or not asked).
]]
--- @include "scores"
--- @include "member"
--- @include "records"
--- @include "pending"
--- @include "group_keys"
--- @include "key_locks"

local now = tonumber(ARGV[1])
local count = tonumber(ARGV[2])
local lease_until = fmt(now + tonumber(ARGV[3]))
local serial = ARGV[4] == "1"
local promote_limit = tonumber(ARGV[5])
local window = tonumber(ARGV[6])

local slots = {}
for first = 1, #KEYS, 1 + GROUP_KEY_COUNT do
  local k = group_keys(first + 1)
  k.seq = KEYS[first]
  slots[#slots + 1] = k
  promote_due(k.ready, k.delayed, now, promote_limit)
end

local candidates = {}

-- On a serial topic the head of a slot can be one busy key's backlog, all held back by its
-- lock: look past it, up to `window` members deep, for the first message of each key that
-- is not in flight, so that other keys still run in parallel.
local function unlocked_heads(k, i)
  local seen, found, offset = {}, 0, 0
  local page = math.min(math.max(count, 64), window)
  while found < count and offset < window do
    local head = rcall("ZRANGE", k.ready, offset, math.min(offset + page, window) - 1,
      "WITHSCORES")
    for j = 1, #head, 2 do
      local key = member_key(head[j])
      if not seen[key] then
        local lock = rcall("HGET", k.locks, key)
        if lock and is_retry_hold(lock) and not holds_for(lock, head[j])
            and retry_hold_is_stale(k, lock) then
          rcall("HDEL", k.locks, key)
          lock = false
        end
        if not lock or holds_for(lock, head[j]) then
          seen[key] = true
          candidates[#candidates + 1] = {tonumber(head[j + 1]), i, head[j]}
          found = found + 1
          if found == count then
            break
          end
        elseif not is_retry_hold(lock) then
          seen[key] = true  -- in flight: none of this key's messages may run now
        end  -- held for a retry: keep looking for that message; the key's others wait
      end
    end
    if #head < 2 * page then
      break
    end
    offset = offset + page
  end
end

-- The next message to claim, best first, across the slots: on a serial topic from the
-- sorted unlocked heads; otherwise by merging the slots' ready zsets, read a chunk at a time
-- (everything taken from a chunk is claimed and removed, so a refill reads from the top).
local next_candidate
if serial then
  for i, k in ipairs(slots) do
    unlocked_heads(k, i)
  end
  table.sort(candidates, function(a, b) return a[1] < b[1] end)
  local n = 0
  next_candidate = function()
    n = n + 1
    local c = candidates[n]
    if c then
      return c[1], c[2], c[3]
    end
  end
else
  local chunk = math.ceil(count / #slots) + 4
  local members, scores, pos, more = {}, {}, {}, {}
  local function refill(i)
    local head = rcall("ZRANGE", slots[i].ready, 0, chunk - 1, "WITHSCORES")
    members[i], scores[i], pos[i] = {}, {}, 1
    for j = 1, #head, 2 do
      members[i][#members[i] + 1] = head[j]
      scores[i][#scores[i] + 1] = tonumber(head[j + 1])
    end
    more[i] = #head == 2 * chunk
  end
  for i = 1, #slots do
    refill(i)
  end
  next_candidate = function()
    local best
    for i = 1, #slots do
      if pos[i] > #members[i] and more[i] then
        refill(i)
      end
      if pos[i] <= #members[i] and (not best or scores[i][pos[i]] < scores[best][pos[best]]) then
        best = i
      end
    end
    if best then
      local j = pos[best]
      pos[best] = j + 1
      return scores[best][j], best, members[best][j]
    end
  end
end

local out = {-1}
local claimed = 0
while claimed < count do
  local score, i, member = next_candidate()
  if not score then
    break
  end
  local k = slots[i]
  local key = serial and member_key(member)
  local lock = key and rcall("HGET", k.locks, key)
  if not lock or holds_for(lock, member) then
    rcall("ZREM", k.ready, member)
    local attempts = rcall("HGET", k.attempts, member)
    if attempts then
      rcall("HDEL", k.attempts, member)
    end
    attempts = (tonumber(attempts) or 0) + 1
    local id = rcall("INCR", k.seq)
    local p = ready_priority(score)
    local due = math.min(stamp_due(ready_stamp(score)), now)
    rcall("HSET", k.inflight, id, inflight_record(p, attempts, due, member))
    rcall("ZADD", k.leases, lease_until, id)
    if key then
      rcall("HSET", k.locks, key, id)
    end
    claimed = claimed + 1
    out[#out + 1] = i
    out[#out + 1] = id
    out[#out + 1] = member
    out[#out + 1] = p
    out[#out + 1] = attempts
    out[#out + 1] = due
  end
end

if claimed < count then
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
return out
