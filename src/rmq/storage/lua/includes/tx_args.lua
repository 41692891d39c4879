--[[
  The arguments every transaction script opens with (tx_send.lua, tx_commit.lua,
  tx_rollback.lua, tx_check.lua, tx_decide.lua), in one order, named as
  storage/transactions.py's TxArgs names its fields, which build them (the two change
  together: tests/test_script_loader.py checks that they agree). A script that does not use
  one is passed "" for it; its own arguments follow, from ARGV[5] on.

  ARGV[1]  tx_id         the transaction id
  ARGV[2]  now           epoch ms
  ARGV[3]  retention_ms  tx_retention, ms: how long a closed id is remembered ("" in
                         tx_check.lua, which remembers none)
  ARGV[4]  generation    the topic's generation as the client read it ("": none; the
                         topic's scripts, tx_check.lua and tx_decide.lua, check none)

  tx_args(): the four, now and retention_ms as numbers (retention_ms nil when "").

  Provides: tx_args.  Needs: ARGV.
]]

local function tx_args()
  local tx_id, now, retention_ms, generation = unpack(ARGV, 1, 4)
  return tx_id, tonumber(now), tonumber(retention_ms), generation
end
