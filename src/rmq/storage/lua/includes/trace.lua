--[[
  The trace of a topic's messages (docs/trace.md): every state change of a message in a
  group, recorded in the message's slot while the topic's `trace` setting is on.

  A script learns whether to trace from one argument, the topic's trace as the client read
  it from the registry: "" when off (nothing below runs: the script checks it once), else
  "<topic>:<retention ms>:<cap>", with one more key in KEYS: the slot's trace log (a list,
  one record appended per script call, trace_record.lua).

  Events of a message as sent (sent, promoted, claimed, requeued, merged into a delayed
  message) name it by its entry; those of a delivery (extended, acked, failed, expired,
  released, dead, purged) carry its delivery seq alone, and the reader (storage/trace.py)
  finds them through the message's claimed events, which carry both. So a settle names no
  message and reads no record (an ack traces every id it names: the reader keeps a
  delivery's first ending only). A send merged into a ready message is named by the ready
  score it merged into, as ZMSCORE gave it: no hash is looked up or written per merge, and
  a line of up to REFS_PER_LINE scores stands for that many merges. The reader learns
  whose score it is from the events that name the message with its score: its claim (the
  "claimed" line lists the scores its messages had), a "rescored" line (a ready message's
  score changed: a priority raised by a send, a delivery given back earlier in line), or,
  for a message still pending, its score now.

  attach_trace(k, tracer) gives a slot's tracer (open_trace, trace_record.lua) to a group
  key table `k`, through which a group's events are recorded: trace_sent(k, member),
  trace_message(k, event, member, delivery), trace_merged(k, member, held),
  trace_rescored(k, member, held), trace_delivery(k, event, id, error),
  trace_present(k, event, ids, present) (the ids whose `present` entry is set), and
  trace_taken(slots, out, o, consumer, scores, names), a claim's messages from its reply (take.lua's
  take_chosen, written into `out` from `out[o]`). trace_save(tracer) writes a tracer's
  record at the end of the script.

  Provides: attach_trace, trace_sent, trace_message, trace_merged, trace_rescored,
  trace_delivery, trace_present, trace_taken, and open_trace (trace_record.lua) and
  trace_save (trace_save.lua).  Needs: rcall, CALL, and the includes below.
]]
--- @include "records"
--- @include "scores"
--- @include "trace_record"
--- @include "trace_save"

-- The group of a group key ("rmq:{t:s}:<group>:<kind>"): names hold no ":" or "}", so two
-- plain finds do, with no pattern to run.
local function attach_trace(k, tracer)
  if tracer then
    k.trace = tracer
    local key = k.inflight or k.ready or k.dead
    local from = string.find(key, "}:", 1, true) + 2
    k.group_name = string.sub(key, from, string.find(key, ":", from, true) - 1)
  end
end

-- "<event>\t<group>\t", made once per call and group
local function head(k, event)
  local heads = k.trace_heads
  if not heads then
    heads = {}
    k.trace_heads = heads
  end
  local text = heads[event]
  if not text then
    text = event .. "\t" .. k.group_name .. "\t"
    heads[event] = text
  end
  return text
end

-- A consumer or an error as a field: no tab or newline in it.
local function field_text(text)
  if text and string.find(text, "[\t\n]") then
    return (string.gsub(text, "[\t\n]", " "))
  end
  return text or ""
end

-- A message stored new in k's group: one "sent" line per group and call (trace_save.lua).
local function trace_sent(k, member)
  local members = k.trace_sent
  if not members then
    members = {}
    k.trace_sent = members
    local sending = k.trace.sending or {}
    sending[#sending + 1] = k
    k.trace.sending = sending
  end
  members[#members + 1] = member
end

-- An event of the message `member` (promoted, requeued); `delivery`: the dead letter it came
-- from (requeued), or nil.
local function trace_message(k, event, member, delivery)
  local tracer = k.trace
  add_line(tracer, head(k, event) .. "=1\t" .. (delivery and "d" .. delivery or "")
    .. "\t\t\t\t\t", 1)
  add_entry(tracer, member)
end

-- A send merged into the message pending in k's group: `held`, the ready score it merged
-- into, as Redis gave it, or nil for a delayed message (named by its entry, with a count).
-- Written by trace_save.
local function trace_merged(k, member, held)
  local merges = k.trace_merges
  if not merges then
    merges = {refs = {}, n = 0, entries = {}, counts = {}}
    k.trace_merges = merges
    local merging = k.trace.merging or {}
    merging[#merging + 1] = k
    k.trace.merging = merging
  end
  if held then
    local n = merges.n + 1
    merges.refs[n] = held
    merges.n = n
    return
  end
  local entry = entry_of(k.trace, member)
  local count = merges.counts[entry]
  if not count then
    merges.entries[#merges.entries + 1] = entry
  end
  merges.counts[entry] = (count or 0) + 1
end

-- The ready message `member` of k's group leaves the score `held` for another: the merges
-- recorded under `held` are its.
local function trace_rescored(k, member, held)
  add_line(k.trace, head(k, "rescored") .. "=1\t\t\t\t" .. held .. "\t\t", 1)
  add_entry(k.trace, member)
end

-- An event of the delivery `id` (its seq, as text); `err`: the error, if any.
local function trace_delivery(k, event, id, err)
  add_line(k.trace, head(k, event) .. "\td" .. id .. "\t\t\t\t\t" .. field_text(err), 1)
end

-- An event of each of `ids` whose `present` entry is set (a record read, or a flag).
-- One line for all of them: their seqs joined by commas (ids as the script got them).
local function trace_present(k, event, ids, present)
  local listed = ids
  if present ~= ids then
    listed = {}
    for j, id in ipairs(ids) do
      if present[j] then
        listed[#listed + 1] = id
      end
    end
  end
  if #listed > 0 then
    add_line(k.trace, head(k, event) .. "\td" .. table.concat(listed, ",") .. "\t\t\t\t\t",
      #listed)
  end
end

-- A claim's messages from its reply, out[o] on: the number of shares, per share its slot
-- index and first delivery id, then runs (length, priority, attempts, due) of (slot index,
-- member) pairs; a slot's messages take its share's ids in the order they come (take.lua).
-- `scores`: the ready scores of the claim's messages in the same order (take.lua's
-- taken.score). Each share is one "claimed" line in its slot's record: the first delivery
-- seq, the attempts joined by commas ("" when each is a first), the scores (the first, then
-- each one's difference from the one before: mostly a few small numbers, whose text is
-- kept, where formatting each score cost 1 750 instructions a message), the consumer; then
-- the messages' entries. The line's place is kept while the entries are
-- appended, and it is written once the share is complete. `names`: when the topic merges by
-- key, the messages' identities in the same order (what names them), else nil.
local function trace_taken(slots, out, o, consumer, scores, names)
  local shares, open = out[o], {}
  for s = 1, shares do
    local i = out[o + 2 * s - 1]
    local tracer = slots[i].trace
    local at = tracer.np + 1
    tracer.pieces[at] = false
    tracer.np = at
    open[i] = {tracer = tracer, at = at, n = 0, first = out[o + 2 * s], scores = {}}
  end
  local at, last, t, holder = o + 1 + 2 * shares, #out, 0, field_text(consumer)
  while at <= last do
    local n, tries = out[at], out[at + 2]
    for m = 1, n do
      local share = open[out[at + 2 + 2 * m]]
      local c, tracer = share.n + 1, share.tracer
      share.n = c
      local np = tracer.np + 1
      t = t + 1
      tracer.pieces[np] = entry_of(tracer, names and names[t] or out[at + 3 + 2 * m])
      tracer.np = np
      local score = scores[t]
      share.scores[c] = c == 1 and fmt(score) or int_text(score - share.last)
      share.last = score
      if tries ~= 1 then  -- most messages are on their first: left out
        share.tries = share.tries or {}
        share.tries[c] = tries
      end
    end
    at = at + 4 + 2 * n
  end
  for i, share in pairs(open) do
    local n, tries = share.n, ""
    if share.tries then
      local texts = {}
      for m = 1, n do
        texts[m] = int_text(share.tries[m] or 1)
      end
      tries = table.concat(texts, ",")
    end
    share.tracer.pieces[share.at] = head(slots[i], "claimed") .. "=" .. int_text(n) .. "\td"
      .. share.first .. "\t" .. tries .. "\t\t" .. table.concat(share.scores, ",") .. "\t"
      .. holder .. "\t"
    share.tracer.n = share.tracer.n + n
  end
end
