#!lua flags=allow-oom
--[[
  The head of one slot of one group, for a cluster claim to choose from before it claims
  (docs/semantics.md, Order): promotes due delayed messages first, then returns the scores
  of the best ready messages, which claim.lua would take in this order, and the earliest
  delayed due time. On a serial topic only messages whose key is free count
  (includes/unlocked.lua), as claim.lua sees them.

  KEYS         the 9 group keys of includes/group_keys.lua
  ARGV[1]      now, epoch ms
  ARGV[2]      depth: how many ready scores to return at most
  ARGV[3]      1 if the topic is key-serial
  ARGV[4]      how many due delayed messages to promote at most
  ARGV[5]      serial topics: how deep to look for keys that are not in flight (>= depth)

  Returns {next_due or -1, more, score...}: up to `depth` ready scores, best first; more is
  1 when ready messages may follow the last one returned.

  Flags: allow-oom, since its promotion only moves messages already stored, so that
  consumers can drain a Redis that is out of memory.
]]
local rcall = redis.call
--- @include "scores"
--- @include "member"
--- @include "pending"
--- @include "group_keys"
--- @include "key_locks"
--- @include "unlocked"

local now = tonumber(ARGV[1])
local depth = tonumber(ARGV[2])
local serial = ARGV[3] == "1"
local k = group_keys(1)
promote_due(k.ready, k.delayed, now, tonumber(ARGV[4]))

local out = {-1, 0}
local later = rcall("ZRANGE", k.delayed, 0, 0, "WITHSCORES")
if later[2] then
  out[1] = delayed_due(tonumber(later[2]))
end
if serial then
  local more = unlocked_heads(k, depth, tonumber(ARGV[5]), function(score)
    out[#out + 1] = score
  end)
  out[2] = more and 1 or 0
else
  local head = rcall("ZRANGE", k.ready, 0, depth - 1, "WITHSCORES")
  for j = 2, #head, 2 do
    out[#out + 1] = tonumber(head[j])
  end
  if #head == 2 * depth and rcall("ZCARD", k.ready) > depth then
    out[2] = 1
  end
end
return out
