--[[
  A transaction's state in one slot (docs/transactions.md): open while the slot's `open`
  zset holds its id, closed once `closed` does. A closed id is scored closed_ms * 2 + 1
  when committed, + 0 when rolled back, and forgotten tx_retention after it closed.

  The topic keeps the same record of its closed ids, on its registry tag: a replay that
  sends to slots the transaction never held finds the id there. On a single node the
  scripts of every slot are passed that key (t.topic) and read and write it themselves; on a
  cluster, where it lives on another node, the client reads it before a half send and
  writes it before a close (tx_decide.lua), and t.topic is nil.

  tx_keys(first, topic): the keys TxSlotKeys.of() passes, from KEYS[first] on, and the
  topic's record of closed ids (a key, or nil).
  closed_state(key, id, now, retention): "committed", "rolled_back" or nil (never closed,
  or closed longer ago than `retention` ms), from the record `key`.
  tx_closed(t, id, now, retention): the state a send finds: the topic's, else the slot's.
  tx_close_refused(t, id, now, retention, committed): what stops a close of the slot (this
  way when `committed`): the slot closed already (either way), or the topic closed the
  other way; nil when the close goes on.
  remember_closed(key, id, now, committed, retention): the id closed in the record `key`
  (kept as first closed; ids past `retention` forgotten).
  tx_close(t, id, now, committed, retention, held): the slot's part of the transaction is
  closed: its halves and parts dropped, the id remembered (in the topic's record too), the
  counts kept.

  Provides: TX_DONE, TX_COMMITTED, TX_ROLLED_BACK, TX_UNKNOWN, tx_keys, closed_state,
  tx_closed, tx_close_refused, remember_closed, tx_close, tx_state_code.  Needs: rcall,
  KEYS, and the includes below.
]]
--- @include "scores"

-- What tx_send, tx_commit and tx_rollback answer first: what they did, or why not.
local TX_DONE = 0          -- sent, or closed by this call
local TX_COMMITTED = 1     -- closed before: committed
local TX_ROLLED_BACK = 2   -- closed before: rolled back
local TX_UNKNOWN = 3       -- neither open nor remembered in this slot

local function tx_keys(first, topic)
  return {open = KEYS[first], closed = KEYS[first + 1], halves = KEYS[first + 2],
    parts = KEYS[first + 3], counts = KEYS[first + 4], topic = topic}
end

local function closed_state(key, id, now, retention)
  local score = rcall("ZSCORE", key, id)
  if not score then
    return nil
  end
  score = tonumber(score)
  if (score - score % 2) / 2 < now - retention then
    return nil  -- forgotten: closed longer ago than tx_retention
  end
  return score % 2 == 1 and "committed" or "rolled_back"
end

local function tx_closed(t, id, now, retention)
  return t.topic and closed_state(t.topic, id, now, retention)
    or closed_state(t.closed, id, now, retention)
end

local function tx_close_refused(t, id, now, retention, committed)
  local here = closed_state(t.closed, id, now, retention)
  if here then
    return here
  end
  -- closed the same way on the topic: a close cut off midway, which this call goes on with
  local topic = t.topic and closed_state(t.topic, id, now, retention)
  if topic and (topic == "committed") ~= committed then
    return topic
  end
  return nil
end

local function tx_state_code(state)
  return state == "committed" and TX_COMMITTED or TX_ROLLED_BACK
end

-- The ids closed longer ago than `retention` are forgotten here, where the zset grows.
local function remember_closed(key, id, now, committed, retention)
  rcall("ZREMRANGEBYSCORE", key, "-inf", "(" .. fmt((now - retention) * 2))
  rcall("ZADD", key, "NX", fmt(now * 2 + (committed and 1 or 0)), id)
end

-- The slot's part of the transaction closed: `held` half messages it held dropped (a
-- commit has put them into pending first), the id remembered in the slot and the topic.
local function tx_close(t, id, now, committed, retention, held)
  if t.topic then
    remember_closed(t.topic, id, now, committed, retention)
  end
  remember_closed(t.closed, id, now, committed, retention)
  rcall("ZREM", t.open, id)
  rcall("UNLINK", t.halves, t.parts)
  if held > 0 then
    rcall("HINCRBY", t.counts, "halves", -held)
  end
  rcall("HINCRBY", t.counts, committed and "committed" or "rolled_back", 1)
end
