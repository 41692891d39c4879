--[[
  Putting a batch of messages into pending in every bound group of one slot whose filter
  accepts them, with the merge rules: what a send does (enqueue.lua), and what a
  transaction's commit does with its half messages (tx_commit.lua), so a committed message
  is stored exactly as a sent one.

  enqueue_batch(source, first_arg, first_key, last_key, now, clock, slot, filters, tracer,
  by_key, stops, versions) reads runs of messages from source[first_arg..] (versions.lua) and
  the groups' keys from KEYS[first_key..last_key] (the 11 group keys, plus the 2 heads
  index keys when `slot` is not ""). `filters`: enqueue.lua's filters argument; `tracer`:
  the slot's (trace.lua), or nil; `by_key`: the topic merges by key (pending.lua): each
  message is placed, merged and traced by its identity, and its value, the newest, kept in
  `values`; a message a group's filter rejects withdraws its identity's pending one from
  that group. `stops`: "" when no group supersedes, else the JSON of {channel, groups}: per
  group in KEYS order, its [name, supersede_limit] or 0 when it does not supersede; a
  message such a group accepts supersedes a running delivery of its identity (running.lua),
  told on the channel. `versions`: the slot's (versions.lua's Versions.open), or nil: a
  message older than its identity's version is dropped for every group (counted
  `outdated`, answered OUTDATED).
  Returns one integer per message as enqueue.lua does (1: merged in every group that
  accepted it), counts sent, merged and filtered per group, and traces sent and merged. The
  caller calls trace_save(tracer) and finish(clock, channel) afterwards.

  open_batch_trace(spec) opens the slot's tracer of such a call (nil when `spec` is "") and
  says where the groups' keys end: with the trace on, KEYS ends with the slot's trace log.

  Provides: enqueue_batch, open_batch_trace.  Needs: rcall, KEYS, CALL, the includes below.
]]
--- @include "pending"
--- @include "group_keys"
--- @include "heads"
--- @include "member"
--- @include "filter"
--- @include "trace"
--- @include "running"
--- @include "versions"

local function open_batch_trace(spec)
  if spec == "" then
    return nil, #KEYS
  end
  return open_trace(spec, KEYS[#KEYS]), #KEYS - 1
end

local function enqueue_batch(source, first_arg, first_key, last_key, now, clock, slot,
                             filters_json, tracer, by_key, stops_json, versions)
  local runs, names, total = Versions.read_runs(source, first_arg, by_key)
  local stride = slot == "" and GROUP_KEY_COUNT or GROUP_KEY_COUNT + 2
  local outdated  -- the message numbers dropped as older than their identity's version
  if versions then
    versions:forget(now, runs, first_key, last_key, stride)
    runs, outdated = versions:keep_fresh(runs, source, names, now)
  end
  local filters = filters_json ~= "" and cjson.decode(filters_json) or nil
  local stops = stops_json ~= "" and cjson.decode(stops_json) or nil

  local function open_group(first)
    local k = group_keys(first)
    if slot ~= "" then
      attach_heads(k, KEYS[first + GROUP_KEY_COUNT], KEYS[first + GROUP_KEY_COUNT + 1], slot)
    end
    attach_trace(k, tracer)
    return k
  end

  -- The group's supersede, as stop(identity) with the deliveries it stops told at the end
  -- (publish_stops()), or nil when the group does not supersede.
  local stopped_in = {}
  local function group_stops(k, first)
    local group = stops and stops.groups[(first - first_key) / stride + 1]
    if type(group) ~= "table" then
      return nil
    end
    local stopped = {}
    stopped_in[#stopped_in + 1] = {group[1], stopped}
    return function(identity) supersede(k, identity, group[2], stopped) end
  end
  local function publish_all()
    for _, told in ipairs(stopped_in) do
      publish_stops(stops.channel, KEYS[1], told[1], slot_number(KEYS[first_key]),
        "superseded", told[2])
    end
  end

  -- The filter of the group whose keys start at KEYS[first], as accepts(i) over source[i],
  -- or nil when it has none. A member's tag and properties are decoded once for all groups.
  local metas = {}
  local function group_filter(first)
    local program = filters and filters[(first - first_key) / stride + 1]
    if type(program) ~= "table" then
      return nil
    end
    local passes = compile_filter(program)
    return function(at)
      local meta = metas[at]
      if not meta then
        local tag, props = member_meta(source[at])
        meta = {tag, props}
        metas[at] = meta
      end
      return passes(meta[1], meta[2])
    end
  end

  -- Per message: 2 while no group has accepted it, 1 while every group that did merged it,
  -- 0 once a group stored it new.
  local UNSEEN = filters and 2 or 1

  -- A single send: put_pending itself, which put_pending_run is defined to equal message by
  -- message, without the batch path's tables and closures (a sixth of a single send's
  -- server instructions, CHANGELOG.md).
  if total == 1 and #runs == 1 then
    local priority, due, at = runs[1][1], runs[1][2], runs[1][3]
    local member = names[at]
    local merged_everywhere = UNSEEN
    for first = first_key, last_key, stride do
      local k = open_group(first)
      local accepts = group_filter(first)
      if accepts and not accepts(at) then
        rcall("HINCRBY", k.counters, "filtered", 1)
        if by_key and withdraw_pending(k, member) then
          forget_withdrawn(k, member)
        end
      else
        rcall("HINCRBY", k.counters, "sent", 1)
        local merged, held = put_pending(k, member, priority, due, now, clock, nil)
        if by_key then
          put_value(k, member, source[at], merged, true)
        end
        local stop = group_stops(k, first)
        if stop then
          stop(member)
        end
        if merged then
          rcall("HINCRBY", k.counters, "merged", 1)
          if merged_everywhere == 2 then
            merged_everywhere = 1
          end
          if tracer then
            trace_merged(k, member, held)
          end
        else
          merged_everywhere = 0
          if tracer then
            trace_sent(k, member)
          end
        end
      end
    end
    publish_all()
    return {merged_everywhere == 1 and 1 or 0}
  end

  local merged_everywhere = {}
  for n = 1, total do
    merged_everywhere[n] = UNSEEN
  end

  for first = first_key, last_key, stride do
    local k = open_group(first)
    local accepts = group_filter(first)
    local stop = group_stops(k, first)
    local merged, accepted = 0, 0
    for _, run in ipairs(runs) do
      local offset = run[5]
      local on_send = function(n, was_merged)
        accepted = accepted + 1
        if was_merged then
          merged = merged + 1
          if merged_everywhere[offset + n] == 2 then
            merged_everywhere[offset + n] = 1
          end
        else
          merged_everywhere[offset + n] = 0
        end
      end
      if tracer then
        local counted, from = on_send, run[3]
        on_send = function(n, was_merged, held)
          if was_merged then
            trace_merged(k, names[from + n - 1], held)
          else
            trace_sent(k, names[from + n - 1])
          end
          counted(n, was_merged)
        end
      end
      if stop then
        local told, from = on_send, run[3]
        on_send = function(n, was_merged, held)
          told(n, was_merged, held)
          stop(names[from + n - 1])
        end
      end
      if not by_key then
        put_pending_run(k, run[3], run[4], run[1], run[2], now, clock, on_send, accepts,
          source)
      elseif not accepts then
        -- the identities merge as members do, then one HSET writes the values in send
        -- order: a key's last value in the batch wins
        put_pending_run(k, run[3], run[4], run[1], run[2], now, clock, on_send, nil, names)
        local values = {}
        for at = run[3], run[4] do
          values[#values + 1] = names[at]
          values[#values + 1] = source[at]
        end
        bulk("HSET", k.values, values)
      else
        -- one by one in send order: a key's value the filter rejects withdraws the one
        -- pending before it, and a later accepted one is pending again
        for at = run[3], run[4] do
          if accepts(at) then
            local merged, held = put_pending(k, names[at], run[1], run[2], now, clock, nil)
            put_value(k, names[at], source[at], merged, true)
            on_send(at - run[3] + 1, merged, held)
          elseif withdraw_pending(k, names[at]) then
            forget_withdrawn(k, names[at])
          end
        end
      end
    end
    if accepted > 0 then
      rcall("HINCRBY", k.counters, "sent", accepted)
    end
    local dropped = outdated and #outdated or 0
    if accepted < total - dropped then
      rcall("HINCRBY", k.counters, "filtered", total - dropped - accepted)
    end
    if outdated then
      Versions.count_outdated(k, outdated)
    end
    if merged > 0 then
      rcall("HINCRBY", k.counters, "merged", merged)
    end
  end
  if filters then
    for n = 1, total do
      if merged_everywhere[n] == 2 then
        merged_everywhere[n] = 0
      end
    end
  end
  if outdated then
    for _, n in ipairs(outdated) do
      merged_everywhere[n] = Versions.OUTDATED
    end
  end
  publish_all()
  return merged_everywhere
end
