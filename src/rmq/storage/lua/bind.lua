#!lua
--[[
  Bind a group to a topic with its filters and supersede, in one step (storage/bindings.py):
  a starting consumer's bind that keeps the group's filters, racing an operator's bind that
  sets them, then either finds the group bound (and keeps what the operator set) or binds
  it first (and the operator's filters replace its none), never erasing them in between.

  KEYS[1]      groups: set, the topic's bound group names
  KEYS[2]      unbound: set, groups unbound since
  KEYS[3]      filters: hash, bound group -> JSON of its filters
  KEYS[4]      supersede: hash, bound group -> its supersede_limit (groups with supersede)
  ARGV[1]      the group
  ARGV[2]      "keep": a bound group keeps its filters, a group not bound is bound with
               none; "set": the group's filters become ARGV[3]
  ARGV[3]      with "set": the JSON of the filters, "" for none
  ARGV[4]      "keep": a bound group keeps its supersede, a group not bound is bound
               without; "": supersede off; else on, with this supersede_limit

  Returns 1 if it bound the group, 0 if the group was bound already.

  Flags: none: a bind grows memory, so it is refused whole when Redis is out of memory
  (the client reads first and calls this only when something changes).
]]
local group = ARGV[1]
local bound = rcall("SISMEMBER", KEYS[1], group) == 1
  and rcall("SISMEMBER", KEYS[2], group) == 0
if ARGV[4] == "keep" then
  if not bound then
    rcall("HDEL", KEYS[4], group)
  end
elseif ARGV[4] == "" then
  rcall("HDEL", KEYS[4], group)
else
  rcall("HSET", KEYS[4], group, ARGV[4])
end
if ARGV[2] == "keep" then
  if bound then
    return 0
  end
  -- a group not bound has no filters: any found are an unbind's, cut off before its end
  rcall("HDEL", KEYS[3], group)
elseif ARGV[3] == "" then
  rcall("HDEL", KEYS[3], group)
else
  rcall("HSET", KEYS[3], group, ARGV[3])
end
if bound then
  return 0
end
rcall("SREM", KEYS[2], group)
return rcall("SADD", KEYS[1], group)
