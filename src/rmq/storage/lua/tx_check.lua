#!lua
--[[
  The check-back's lease on one transaction (docs/transactions.md), on the topic's registry
  tag: at most one checker at a time asks the application about it, at most max_checks
  times, check_interval apart; then the transaction is abandoned (counted once).

  KEYS[1]      hash    the topic's check records: transaction id -> "checks,next_ms" or
                       "checks,next_ms,a" once abandoned
  KEYS[2]      string  the topic's count of abandoned transactions
  ARGV[1..4]   the transaction's arguments, named in includes/tx_args.lua: tx_id, now;
               retention_ms and generation "" (unused: the record is the topic's, and a
               closed transaction's is removed, not remembered)
  ARGV[5]      mode: what happens, "begin" (a checker wants to ask), "unknown" (the checker
               could not tell: ask again after check_interval), "done" (closed: forget it)
  ARGV[6]      interval: check_interval, ms, the lease of a check and the wait after an
               unknown
  ARGV[7]      max_checks

  Returns, for "begin": {"check", n} (the caller asks, this is the n-th check), {"wait",
  checks, next_ms} (another checker holds the lease, or the interval has not passed),
  {"abandon", checks, 1} (the checks ran out: counted now; roll it back) or {"abandon",
  checks, 0} (counted before: finish its rollback). For "unknown" and "done": {"ok"}.

  No flags: it grows memory (a record per open transaction checked).
]]
--- @include "tx_args"

local tx_id, now = tx_args()
local mode, interval, max_checks = ARGV[5], tonumber(ARGV[6]), tonumber(ARGV[7])
local record = rcall("HGET", KEYS[1], tx_id)
local checks, next_at, abandoned = 0, 0, false
if record then
  local c, n, a = string.match(record, "^(%d+),(%d+)(,?a?)$")
  checks, next_at, abandoned = tonumber(c) or 0, tonumber(n) or 0, a == ",a"
end

if mode == "done" then
  rcall("HDEL", KEYS[1], tx_id)
  return {"ok"}
end
if mode == "unknown" then
  if record and not abandoned then
    rcall("HSET", KEYS[1], tx_id, string.format("%d,%d", checks, now + interval))
  end
  return {"ok"}
end

if abandoned then
  return {"abandon", checks, 0}
end
if now < next_at then
  return {"wait", checks, next_at}
end
if checks >= max_checks then
  rcall("HSET", KEYS[1], tx_id, string.format("%d,%d,a", checks, now))
  rcall("INCR", KEYS[2])
  return {"abandon", checks, 1}
end
checks = checks + 1
rcall("HSET", KEYS[1], tx_id, string.format("%d,%d", checks, now + interval))
return {"check", checks}
