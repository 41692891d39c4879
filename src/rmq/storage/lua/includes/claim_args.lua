--[[
  The arguments every claim script opens with (claim.lua, claim_heads.lua), in this order,
  named as storage/claim_calls.py's ClaimArgs names its fields, which build them (the two
  change together: tests/test_script_loader.py checks that they agree):

  ARGV[1]   now            epoch ms
  ARGV[2]   max_count      how many messages to claim at most
  ARGV[3]   lease_ms       the lease, ms
  ARGV[4]   serial         "1" if the topic is key-serial (skip messages whose key is in
                           flight)
  ARGV[5]   promote_limit  how many due delayed messages one slot promotes per call at most
  ARGV[6]   scan           serial topics: how deep to look into each slot's ready messages
                           for keys that are not in flight (>= max_count)
  ARGV[7]   generation     the topic's generation as the client read it ("": none)
  ARGV[8]   holder         who claims (a consumer's id; "": not said)
  ARGV[9]   limit_group    the group whose limits the script applies (a single node:
                           includes/limit_claim.lua), "" for none (a cluster's call)
  ARGV[10]  limit_waiter   the waiter id registered when the limits grant nothing
  ARGV[11]  limit_wait_ms  the longest it waits, ms
  ARGV[12]  trace          the topic's trace as the client read it: "" when off
                           (includes/trace.lua)
  ARGV[13]  by_key         "1" if the topic merges by key: its ready members are
                           identities, the messages in `values` (includes/pending.lua)
  ARGV[14]  supersede      "1" if the group supersedes: each delivery is noted in its
                           group's `running` (includes/running.lua)

  claim_args(generation_key) checks the topic's generation first (generation.lua): when
  the topic is gone it returns the reply to give instead, and nothing else; otherwise nil,
  then the fourteen in this order, now, max_count, lease_ms, promote_limit, scan and
  limit_wait_ms as numbers and serial, by_key and supersede booleans, which a script reads
  into locals of these names (as values, not a table: a table cost a claim 6 k instructions).
  claim_trace(trace, first) opens the tracer of the slot whose keys start at KEYS[first]
  (its trace log follows its 12), and claim_stride(trace) says how many keys a slot has:
  12, or 13 with the trace on.

  Provides: claim_args, claim_trace, claim_stride.  Needs: ARGV, and the includes below.
]]
--- @include "generation"
--- @include "trace"

local function claim_args(generation_key)
  local now, max_count, lease_ms, serial, promote_limit, scan, generation, holder,
    limit_group, limit_waiter, limit_wait_ms, trace, by_key, supersede = unpack(ARGV, 1, 14)
  local gone = topic_gone(generation_key, generation)
  if gone then
    return gone
  end
  return nil, tonumber(now), tonumber(max_count), tonumber(lease_ms), serial == "1",
    tonumber(promote_limit), tonumber(scan), generation, holder, limit_group, limit_waiter,
    tonumber(limit_wait_ms), trace, by_key == "1", supersede == "1"
end

local function claim_stride(trace)
  return trace == "" and 12 or 13
end

local function claim_trace(trace, first)
  return open_trace(trace, KEYS[first + 12])
end
