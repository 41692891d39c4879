#!lua flags=allow-oom,allow-cross-slot-keys
--[[
  Build a group's heads index (includes/heads.lua) from every slot of the topic: the first
  use of a topic created before the index, and the safety net every RESYNC ms after (a
  claim_heads.lua call asks for it, by Redis's clock), so that a slot the index lost is
  found again.

  KEYS[1]      the generation of slot 0 (includes/generation.lua)
  KEYS[2]      zset  heads_ready
  KEYS[3]      zset  heads_delayed
  KEYS[4]      string heads_synced: set to Redis's clock, epoch ms
  KEYS[5..]    per slot, in slot order from 0: the group's ready zset, then its delayed zset
  ARGV[1]      the topic's generation as the client read it from the registry ("": none)

  Returns the status OK (not an integer: integers say the topic is gone); when the topic is
  gone builds nothing and returns GONE_UNKNOWN or GONE_STALE.

  Flags: allow-oom, since claims wait for it and consumers must drain a Redis that is out
  of memory (the index holds at most two entries per slot); allow-cross-slot-keys, since it
  reads every slot of the topic.
]]
--- @include "scores"
--- @include "bulk"
--- @include "generation"
--- @include "server_clock"

local gone = topic_gone(KEYS[1], ARGV[1])
if gone then
  return gone
end

local ready, delayed = {}, {}
for first = 5, #KEYS, 2 do
  local slot = fmt((first - 5) / 2)
  local head = rcall("ZRANGE", KEYS[first], 0, 0, "WITHSCORES")
  if head[2] then
    ready[#ready + 1] = fmt(tonumber(head[2]))
    ready[#ready + 1] = slot
  end
  head = rcall("ZRANGE", KEYS[first + 1], 0, 0, "WITHSCORES")
  if head[2] then
    delayed[#delayed + 1] = fmt(delayed_due(tonumber(head[2])))
    delayed[#delayed + 1] = slot
  end
end
rcall("UNLINK", KEYS[2], KEYS[3])
bulk("ZADD", KEYS[2], ready)
bulk("ZADD", KEYS[3], delayed)
rcall("SET", KEYS[4], fmt(server_ms()))
return redis.status_reply("OK")
