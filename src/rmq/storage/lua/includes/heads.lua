--[[
  The heads index of a (topic, group) on a single node, for topics of more than 16 slots
  (docs/storage.md, "The heads index"): zset `heads_ready` holds slot numbers scored by the
  best (lowest) ready score of the slot, zset `heads_delayed` slot numbers scored by the
  earliest delayed due time (epoch ms) of the slot. An entry may be optimistic (lower than
  the slot's real head: a message left since), never missing for a slot that holds any: so
  every script that adds to a slot's ready or delayed zset lowers the slot's entries with
  ZADD LT, and only a claim, which reads the slot, raises or removes them.

  attach_heads(k, ready_key, delayed_key, slot) makes the group key table `k` keep its
  slot's entries; note_ready(k, score) and note_delayed(k, due) record what was added
  (nothing when `k` has no index); save_heads() writes each touched entry once, at the end
  of the script (pending.lua's finish calls it).

  Provides: attach_heads, note_ready, note_delayed, save_heads.
  Needs: rcall, CALL (what one call keeps: the entries it touched), and includes scores.
]]
--- @include "scores"

local function attach_heads(k, ready_key, delayed_key, slot)
  k.heads = {ready = ready_key, delayed = delayed_key, slot = slot}
end

-- Keep the lowest value noted in field `low` ("ready_low", "delayed_low") of k's entries.
local function note_low(k, low, value)
  local h = k.heads
  if h then
    if not h.touched then
      h.touched = true
      local touched = CALL.heads_touched or {}
      CALL.heads_touched = touched
      touched[#touched + 1] = h
    end
    if not h[low] or value < h[low] then
      h[low] = value
    end
  end
end

local function note_ready(k, score)
  note_low(k, "ready_low", score)
end

local function note_delayed(k, due)
  note_low(k, "delayed_low", due)
end

local function save_heads()
  for _, h in ipairs(CALL.heads_touched or {}) do
    if h.ready_low then
      rcall("ZADD", h.ready, "LT", fmt(h.ready_low), h.slot)
    end
    if h.delayed_low then
      rcall("ZADD", h.delayed, "LT", fmt(h.delayed_low), h.slot)
    end
  end
  CALL.heads_touched = nil
end
