--[[
  What a claim through the heads index (claim_heads.lua) writes back into it: an entry it
  found optimistic is set to the slot's real head, and an entry of a slot left empty is
  removed (includes/heads.lua says why entries may be optimistic, never missing).

  head_of(key): the lowest score of zset `key`, nil when empty.
  refresh_delayed(heads_delayed, k, slot): the slot's delayed entry set to the head of its
  delayed zset `k.delayed`, or removed.
  save_ready_heads(heads_ready, heads, emptied): `heads` a list of score, slot pairs (as
  ZADD takes them) set, and the slots in `emptied` removed, with one call each.

  Provides: head_of, refresh_delayed, save_ready_heads.  Needs: rcall, and includes scores.
]]
--- @include "scores"

local function head_of(key)
  local head = rcall("ZRANGE", key, 0, 0, "WITHSCORES")
  return head[2] and tonumber(head[2])
end

local function refresh_delayed(heads_delayed, k, slot)
  local later = head_of(k.delayed)
  if later then
    rcall("ZADD", heads_delayed, fmt(delayed_due(later)), slot)
  else
    rcall("ZREM", heads_delayed, slot)
  end
end

local function save_ready_heads(heads_ready, heads, emptied)
  if #heads > 0 then
    rcall("ZADD", heads_ready, unpack(heads))
  end
  if #emptied > 0 then
    rcall("ZREM", heads_ready, unpack(emptied))
  end
end

-- The next due time, exact: the delayed index's first entry of a slot in the window
-- (index_of: slot -> i, slots[i] its keys) is checked against the slot (an optimistic one
-- is fixed, and the next looked at); for one outside the window, need(slot) asks for it
-- and nil is returned. -1 when nothing is delayed.
local function next_due_checked(heads_delayed, index_of, slots, need)
  local checked = {}
  while true do
    local head = rcall("ZRANGE", heads_delayed, 0, 0, "WITHSCORES")
    local slot, due = head[1], tonumber(head[2])
    if not slot or checked[slot] then
      return due or -1
    end
    local i = index_of[slot]
    if not i then
      need(slot)
      return nil
    end
    checked[slot] = true
    refresh_delayed(heads_delayed, slots[i], slot)
  end
end
