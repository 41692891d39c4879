--[[
  A slot's ready messages as a claim's merge reads them: a chunk at a time, each candidate
  ranked by (priority, due millisecond), so that the merge can take the best of several
  slots from a heap (claim_heads.lua).

  ms_key(score): a ready score without its stamp's count within the millisecond. Within a
  slot messages come in score order (the zset's), so send order holds there; across slots,
  messages of one priority due in the same millisecond may come in any order
  (docs/semantics.md, "Order"), which lets the merge take them from the slots it has read
  already before it reads more: a claim of 100 from a burst of sends touches a few slots
  instead of a hundred (most of a claim's cost is per slot).

  new_stream(size) makes an unread stream that reads `size` messages at a time;
  stream_read(s, ready) reads its next chunk of zset `ready`; stream_rank(s) is its rank in
  the heap, key * 4 + class (exact: keys stay below 2^49): class 0 when its next candidate
  is read (key: its ms_key), class 1 when its chunk ran out and more may follow unread (key:
  that of the last one read, a lower bound), nil when it holds nothing more. Its fields:
  members, scores (the chunk), pos (the next candidate), read (how many so far), more.

  stream_head(s): the lowest score the slot may still hold past what was taken, for its
  heads index entry: the next candidate read, or when it was read to the end of a chunk,
  the last score read (a lower bound: the next claim to reach it reads it); nil when none.

  Provides: ms_key, new_stream, stream_read, stream_rank, stream_head.  Needs: rcall.
]]

local function ms_key(score)
  return math.floor(score / 32)  -- exact: scores are integers below 2^53
end

local function new_stream(size)
  return {read = 0, size = size, pos = 1, members = {}, scores = {}, more = false}
end

-- A chunk is as many as the client expects a slot to give (count over the slots the last
-- claim took from: most slots of a big topic give a claim one or two messages, a slot
-- holding a burst gives it many). Reading with scores costs about a microsecond a message,
-- and the chunk that finds where a slot's run ends is mostly left unread, so chunks do not
-- grow.
local function stream_read(s, ready)
  local got = rcall("ZRANGE", ready, s.read, s.read + s.size - 1, "WITHSCORES")
  local members, scores = {}, {}
  for j = 1, #got, 2 do
    members[#members + 1] = got[j]
    scores[#scores + 1] = tonumber(got[j + 1])
  end
  if #members > 0 then
    s.members, s.scores, s.pos = members, scores, 1
  end
  s.read = s.read + #members
  s.more = #members == s.size
end

local function stream_rank(s)
  local score = s.scores[s.pos]
  if score then
    return ms_key(score) * 4
  end
  if s.more then
    return ms_key(s.scores[#s.scores]) * 4 + 1
  end
  return nil
end

local function stream_head(s)
  return s.scores[s.pos] or (s.more and s.scores[#s.scores]) or nil
end
