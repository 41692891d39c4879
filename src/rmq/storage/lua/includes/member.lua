--[[
  A zset member is the body itself, or, when the message has a key (or its body starts with
  a NUL byte), "\0" .. u32be(len(key)) .. key .. body, where len 0xFFFFFFFF means "no key";
  or, when it has a tag or properties, the extended form "\0" .. u32be(0xFFFFFFFE) .. flags
  .. [u32be(len(key)) .. key] .. [u8(len(tag)) .. tag] .. [u32be(len(props)) .. props]
  .. body, flags 1 = key, 2 = tag, 4 = properties (storage/codec.py, docs/storage.md).
  The key a message is serialised under (serial topics) is its key, or its body.

  Provides: member_key, member_meta.  Needs: nothing.
]]
local NO_KEY = 4294967295
local EXTENDED = 4294967294

-- A member cut short (no send writes one: another program's, or damaged) is its own key
-- rather than an error, so that a claim of a serial topic goes on, and the settle that
-- dead-letters what the client cannot decode (storage/dead.py) runs.
local function member_key(member)
  if string.byte(member, 1) ~= 0 then
    return member
  end
  local length = #member
  if length < 5 then
    return member
  end
  local n = struct.unpack(">I4", member, 2)
  if n == NO_KEY then
    return string.sub(member, 6)
  end
  if n ~= EXTENDED then
    return string.sub(member, 6, 5 + n)
  end
  local flags = string.byte(member, 6) or 0
  local at = 7
  if flags % 2 == 1 then
    if length < at + 3 then
      return member
    end
    local size = struct.unpack(">I4", member, at)
    return string.sub(member, at + 4, at + 3 + size)
  end
  if flags % 4 >= 2 then
    at = at + 1 + (string.byte(member, at) or 0)
  end
  if flags % 8 >= 4 then
    if length < at + 3 then
      return member
    end
    at = at + 4 + struct.unpack(">I4", member, at)
  end
  return string.sub(member, at)
end

-- The tag (nil when none) and the properties (name -> string, number or boolean) of a
-- member: what a group's filter reads (includes/filter.lua). Lengths are read byte by byte:
-- cheaper than struct.unpack, which parses its format on every call.
local function member_meta(member)
  local props = {}
  local byte, sub = string.byte, string.sub
  local function u32(at)
    local a, b, c, d = byte(member, at, at + 3)
    return ((a * 256 + b) * 256 + c) * 256 + d
  end
  if byte(member, 1) ~= 0 or u32(2) ~= EXTENDED then
    return nil, props
  end
  local flags = byte(member, 6)
  local at = 7
  local tag
  if flags % 2 == 1 then
    at = at + 4 + u32(at)
  end
  if flags % 4 >= 2 then
    local size = byte(member, at)
    tag = sub(member, at + 1, at + size)
    at = at + 1 + size
  end
  if flags % 8 >= 4 then
    local stop = at + 4 + u32(at)
    at = at + 4
    while at < stop do
      local n = byte(member, at)
      local name = sub(member, at + 1, at + n)
      local kind = byte(member, at + 1 + n)
      local size = u32(at + 2 + n)
      local text = sub(member, at + 6 + n, at + 5 + n + size)
      if kind == 115 then  -- s
        props[name] = text
      elseif kind == 98 then  -- b
        props[name] = text == "1"
      else  -- i, f
        props[name] = tonumber(text)
      end
      at = at + 6 + n + size
    end
  end
  return tag, props
end
