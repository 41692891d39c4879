--[[
  The arguments every claim script opens with (claim.lua, claim_heads.lua; the client's
  storage/claim_calls.py builds them), each named in the script's header:
    ARGV[1] now, epoch ms; ARGV[2] count; ARGV[3] lease, ms; ARGV[4] "1" if the topic is
    key-serial; ARGV[5] how many due delayed messages one slot promotes per call at most;
    ARGV[6] serial topics: how deep to look into each slot's ready messages (>= count);
    ARGV[7] the topic's generation as the client read it; ARGV[8] who claims ("": not said);
    ARGV[9..11] the group's limits on a single node (includes/limit_claim.lua reads them);
    ARGV[12] the topic's trace ("": off; includes/trace.lua).

  claim_args(generation_key) checks the topic's generation first (generation.lua): when
  the topic is gone it returns the reply to give instead, and nothing else; otherwise nil,
  then now, count, lease_until, serial, promote_limit, scan and holder (as records.lua's
  holder_part writes it). claim_trace(first) opens the tracer of the slot whose keys start
  at KEYS[first] (its trace log follows its 10), and claim_stride() says how many keys a
  slot has: 10, or 11 with the trace on.

  Provides: claim_args, claim_trace, claim_stride.  Needs: ARGV, and the includes below.
]]
--- @include "records"
--- @include "generation"
--- @include "trace"

local function claim_args(generation_key)
  local gone = topic_gone(generation_key, ARGV[7])
  if gone then
    return gone
  end
  local now = tonumber(ARGV[1])
  return nil, now, tonumber(ARGV[2]), now + tonumber(ARGV[3]), ARGV[4] == "1",
    tonumber(ARGV[5]), tonumber(ARGV[6]), holder_part(ARGV[8])
end

local function claim_stride()
  return ARGV[12] == "" and 10 or 11
end

local function claim_trace(first)
  return open_trace(ARGV[12], KEYS[first + 10])
end
