--[[
  Key locks of serial topics (hash `locks`: message key -> holder). The holder is either a
  delivery id (digits: that delivery is in flight), or "r" .. member: the message failed and
  waits out its retry backoff, and no other message of its key may run before it, so that a
  key's messages keep their send order through failures.

  Provides: is_retry_hold, holds_for, retry_hold_is_stale.  Needs: rcall.
]]
local function is_retry_hold(lock)
  return string.byte(lock, 1) == 114 -- "r"
end

local function holds_for(lock, member)
  return is_retry_hold(lock) and string.sub(lock, 2) == member
end

-- A hold whose message is no longer pending (the topic stopped being serial meanwhile, and
-- the message ran) must not block its key forever.
local function retry_hold_is_stale(k, lock)
  local member = string.sub(lock, 2)
  return not rcall("ZSCORE", k.ready, member) and not rcall("ZSCORE", k.delayed, member)
end
