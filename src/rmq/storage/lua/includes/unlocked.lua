--[[
  Serial topics: the messages of one slot that a claim may take now, best first. The head of
  a slot can be one busy key's backlog, all held back by its lock: look past it, up to
  `window` members deep, for the first message of each key that is not in flight, so that
  other keys still run in parallel. A retry hold whose message is no longer pending is stale
  and removed (key_locks.lua).

  unlocked_heads(k, want, window, take) calls take(score, member) for up to `want` such
  messages in score order, and returns true if it stopped because it had found `want` (more
  may follow). When the slot's key table says `by_key` (the topic merges by key), a member
  is the message's identity: its key itself.

  Provides: unlocked_heads.  Needs: rcall, includes key_locks and member.
]]
local function unlocked_heads(k, want, window, take)
  local seen, found, offset = {}, 0, 0
  local page = math.min(math.max(want, 64), window)
  local any_locks = rcall("EXISTS", k.locks) == 1
  while found < want and offset < window do
    local head = rcall("ZRANGE", k.ready, offset, math.min(offset + page, window) - 1,
      "WITHSCORES")
    -- the page's locks in one read (a call per member cost most of a serial claim)
    local keys, locks = {}, nil
    for j = 1, #head, 2 do
      keys[#keys + 1] = k.by_key and head[j] or member_key(head[j])
    end
    if any_locks and #keys > 0 then
      locks = rcall("HMGET", k.locks, unpack(keys))
    end
    for j = 1, #head, 2 do
      local key = keys[(j + 1) / 2]
      if not seen[key] then
        local lock = locks and locks[(j + 1) / 2]
        if lock and is_retry_hold(lock) and not holds_for(lock, head[j])
            and retry_hold_is_stale(k, lock) then
          rcall("HDEL", k.locks, key)
          lock = false
        end
        if not lock or holds_for(lock, head[j]) then
          seen[key] = true
          take(tonumber(head[j + 1]), head[j])
          found = found + 1
          if found == want then
            return true
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
  return false
end
