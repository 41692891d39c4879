--[[
  Putting a message into pending with the merge rules of SPEC §2: if the member is already
  pending (ready or delayed) nothing new is stored; the pending message keeps the earliest
  due time and the highest priority of the two. Needs scores.lua.

  `stamp` is the ready stamp to use if the message is ready now; nil asks the slot clock
  for the next one (send order). Returns true when the message merged.
]]
local rcall = redis.call

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

local function put_pending(ready, delayed, member, priority, due, now, clock, stamp)
  local score = rcall("ZSCORE", ready, member)
  if score then
    score = tonumber(score)
    if priority > ready_priority(score) then
      rcall("ZADD", ready, fmt(ready_score(priority, ready_stamp(score))), member)
    end
    return true
  end
  score = rcall("ZSCORE", delayed, member)
  if score then
    score = tonumber(score)
    local held_due = delayed_due(score)
    local p = math.max(priority, delayed_priority(score))
    if due <= now then
      rcall("ZREM", delayed, member)
      rcall("ZADD", ready, fmt(ready_score(p, stamp or clock:next())), member)
    elseif due < held_due or p ~= delayed_priority(score) then
      rcall("ZADD", delayed, fmt(delayed_score(math.min(due, held_due), p)), member)
    end
    return true
  end
  if due <= now then
    rcall("ZADD", ready, fmt(ready_score(priority, stamp or clock:next())), member)
  else
    rcall("ZADD", delayed, fmt(delayed_score(due, priority)), member)
  end
  return false
end

-- What a sleeping consumer needs to hear about: work became ready where none was, or the
-- next due time moved earlier. Captured before a change and compared after it.
local function wake_state(ready, delayed)
  local head = rcall("ZRANGE", delayed, 0, 0, "WITHSCORES")
  return {empty = rcall("EXISTS", ready) == 0, next_due = head[2] and tonumber(head[2])}
end

local function needs_wake(before, ready, delayed)
  if before.empty and rcall("EXISTS", ready) == 1 then
    return true
  end
  local head = rcall("ZRANGE", delayed, 0, 0, "WITHSCORES")
  return head[2] ~= nil and (before.next_due == nil or tonumber(head[2]) < before.next_due)
end

-- Delayed messages whose time has come move to ready. Their stamp comes from their due time,
-- not from when this runs, so the order among ready messages does not depend on who promotes.
local function promote_due(ready, delayed, now, limit)
  local due = rcall("ZRANGEBYSCORE", delayed, "-inf", fmt(delayed_score(now, 0)),
    "WITHSCORES", "LIMIT", 0, limit)
  for i = 1, #due, 2 do
    local score = tonumber(due[i + 1])
    rcall("ZREM", delayed, due[i])
    rcall("ZADD", ready,
      fmt(ready_score(delayed_priority(score), due_stamp(delayed_due(score)))), due[i])
  end
  return #due / 2
end
