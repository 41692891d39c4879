#!lua
--[[
  Claims the current history bucket of a topic for one sampler, by Redis's own clock: however
  many consoles and consumers sample a topic, each bucket is sampled once, and samples are
  spaced by the server's time, not by the samplers' clocks.

  KEYS[1]  string  the last bucket claimed (RegistryKeys.history)
  KEYS[2]  string  the topic's settings (RegistryKeys.settings)
  ARGV[1]  bucket width, ms

  Returns {now_ms, 1 if the caller claimed the bucket and must write the sample, else 0}.
  A topic without settings (deleted, while the caller's registry cache still held it)
  has no bucket claimed: its sampler writes nothing, so a delete leaves no history behind.

  No flags: a sample is not worth memory Redis does not have; when it is out of memory the
  script is refused whole and that bucket's sample is skipped (a gap in the history).
  Housekeeping: what it writes is redone if lost, so a client waiting for replicas does not
  wait after it (storage/scripts.py).
]]
--- @housekeeping
--- @include "server_clock"

local now = server_ms()
local bucket = string.format("%d", math.floor(now / tonumber(ARGV[1])))
-- "differs", not "is later": a server clock stepped back must not stop the sampling.
if rcall("EXISTS", KEYS[2]) == 0 or rcall("GET", KEYS[1]) == bucket then
  return {now, 0}
end
rcall("SET", KEYS[1], bucket)
return {now, 1}
