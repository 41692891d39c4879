--[[
  A transaction's state in one slot (docs/transactions.md): open while the slot's `open`
  zset holds its id, closed once `closed` does. A closed id is scored closed_ms * 2 + 1
  when committed, + 0 when rolled back, and forgotten tx_retention after it closed.

  tx_keys(first): the keys TxSlotKeys.of() passes, from KEYS[first] on.
  tx_closed(t, id, now, retention): "committed", "rolled_back" or nil (never closed here,
  or closed longer ago than `retention` ms).
  tx_close(t, id, now, committed, retention, held): the slot's part of the transaction is
  closed: its halves and parts dropped, the id remembered, the counts kept.

  Provides: TX_DONE, TX_COMMITTED, TX_ROLLED_BACK, TX_UNKNOWN, tx_keys, tx_closed,
  tx_close, tx_state_code.  Needs: rcall, KEYS, and the includes below.
]]
--- @include "scores"

-- What tx_send, tx_commit and tx_rollback answer first: what they did, or why not.
local TX_DONE = 0          -- sent, or closed by this call
local TX_COMMITTED = 1     -- closed before: committed
local TX_ROLLED_BACK = 2   -- closed before: rolled back
local TX_UNKNOWN = 3       -- neither open nor remembered in this slot

local function tx_keys(first)
  return {open = KEYS[first], closed = KEYS[first + 1], halves = KEYS[first + 2],
    parts = KEYS[first + 3], counts = KEYS[first + 4]}
end

local function tx_closed(t, id, now, retention)
  local score = rcall("ZSCORE", t.closed, id)
  if not score then
    return nil
  end
  score = tonumber(score)
  if (score - score % 2) / 2 < now - retention then
    return nil  -- forgotten: closed longer ago than tx_retention
  end
  return score % 2 == 1 and "committed" or "rolled_back"
end

local function tx_state_code(state)
  return state == "committed" and TX_COMMITTED or TX_ROLLED_BACK
end

-- The slot's part of the transaction closed: `held` half messages it held dropped (a
-- commit has put them into pending first), the id remembered, the ids closed longer ago
-- than `retention` forgotten (here, where the zset grows).
local function tx_close(t, id, now, committed, retention, held)
  rcall("ZREMRANGEBYSCORE", t.closed, "-inf", "(" .. fmt((now - retention) * 2))
  rcall("ZADD", t.closed, fmt(now * 2 + (committed and 1 or 0)), id)
  rcall("ZREM", t.open, id)
  rcall("UNLINK", t.halves, t.parts)
  if held > 0 then
    rcall("HINCRBY", t.counts, "halves", -held)
  end
  rcall("HINCRBY", t.counts, committed and "committed" or "rolled_back", 1)
end
