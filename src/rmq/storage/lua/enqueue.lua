--[[
  Send a batch of messages to one slot, into every bound group, merging duplicates.

  KEYS[1]      string  the slot clock (last ready stamp handed out)
  KEYS[2..]    per bound group, the 9 group keys of includes/group_keys.lua
  ARGV[1]      now, epoch ms
  ARGV[2]      wake channel, published when a sleeping consumer has something new to do
  ARGV[3..]    triples: member, priority (0-255), due (epoch ms; <= now means ready now)

  Returns one integer per message: 1 when it merged into a pending message in every group.
]]
--- @include "scores"
--- @include "pending"
--- @include "group_keys"

local now = tonumber(ARGV[1])
local clock = open_clock(KEYS[1], now)
local merged_everywhere = {}
for i = 3, #ARGV, 3 do
  merged_everywhere[#merged_everywhere + 1] = 1
end

for first = 2, #KEYS, GROUP_KEY_COUNT do
  local k = group_keys(first)
  local merged = 0
  local n = 0
  for i = 3, #ARGV, 3 do
    n = n + 1
    if put_pending(k, ARGV[i], tonumber(ARGV[i + 1]), tonumber(ARGV[i + 2]),
        now, clock, nil) then
      merged = merged + 1
    else
      merged_everywhere[n] = 0
    end
  end
  rcall("HINCRBY", k.counters, "sent", n)
  if merged > 0 then
    rcall("HINCRBY", k.counters, "merged", merged)
  end
end
finish(clock, ARGV[2])
return merged_everywhere
