#!lua flags=allow-oom
--[[
  Record that a transaction closes, in the topic's record of closed ids, before its slots
  close (a cluster: the record lives on the topic's registry tag, another node than the
  slots'; on a single node the slots' scripts write it themselves). The first close
  recorded decides: a close the other way is refused in every slot from then on, and so is
  a half send (the client reads the record first), whatever slots it goes to.

  KEYS[1]      zset    the topic's closed ids: id -> closed_ms * 2 + 1 committed, + 0 not
                       (includes/tx_state.lua)
  ARGV[1..4]   the transaction's arguments, named in includes/tx_args.lua: tx_id, now,
               retention_ms; generation "" (unused: the record is the topic's)
  ARGV[5]      commit: "1" to commit, "0" to roll back

  Returns TX_DONE when the close stands (recorded now, or the same way before: a retry goes
  on closing the slots), or TX_COMMITTED or TX_ROLLED_BACK when it was closed the other way.

  Flags: allow-oom, as tx_rollback.lua: a full Redis can still roll a transaction back (the
  record is one small entry; a commit's slots are refused then, and are committed again).
]]
--- @include "tx_args"
--- @include "tx_state"

local tx_id, now, retention_ms = tx_args()
local committed = ARGV[5] == "1"
local state = closed_state(KEYS[1], tx_id, now, retention_ms)
if state and (state == "committed") ~= committed then
  return tx_state_code(state)
end
if not state then
  remember_closed(KEYS[1], tx_id, now, committed, retention_ms)
end
return TX_DONE
