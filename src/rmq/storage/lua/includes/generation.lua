--[[
  A topic's generation: a token create_topic writes into the registry and into one key per
  slot, and delete_topic removes from both before any data. A script that would store or
  hand out messages first checks the token the client read from the registry against the
  slot's, so that a send or claim made from a stale cache after the topic was deleted (or
  deleted and created again) is refused instead of writing into keys no topic owns.

  Returns of topic_gone: nil (same generation, or the client passed "" for a topic created
  before generations existed), GONE_UNKNOWN (the slot has no generation: deleted) or
  GONE_STALE (another generation: deleted and created again since the client read it).

  Provides: GONE_UNKNOWN, GONE_STALE, topic_gone.  Needs: rcall.
]]
local GONE_UNKNOWN = 0
local GONE_STALE = -1

local function topic_gone(key, expected)
  if expected == "" then
    return nil
  end
  local generation = rcall("GET", key)
  if not generation then
    return GONE_UNKNOWN
  end
  if generation ~= expected then
    return GONE_STALE
  end
  return nil
end
