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

local function member_key(member)
  if string.byte(member, 1) ~= 0 then
    return member
  end
  local n = struct.unpack(">I4", member, 2)
  if n == NO_KEY then
    return string.sub(member, 6)
  end
  if n ~= EXTENDED then
    return string.sub(member, 6, 5 + n)
  end
  local flags = string.byte(member, 6)
  local at = 7
  if flags % 2 == 1 then
    local size = struct.unpack(">I4", member, at)
    return string.sub(member, at + 4, at + 3 + size)
  end
  if flags % 4 >= 2 then
    at = at + 1 + string.byte(member, at)
  end
  if flags % 8 >= 4 then
    at = at + 4 + struct.unpack(">I4", member, at)
  end
  return string.sub(member, at)
end

-- tonumber is looked up when called: a library cannot read globals while it loads
local PROPERTY_KINDS = {
  s = function(text) return text end,
  i = function(text) return tonumber(text) end,
  f = function(text) return tonumber(text) end,
  b = function(text) return text == "1" end,
}

-- The tag (nil when none) and the properties (name -> string, number or boolean) of a
-- member: what a group's filter reads (includes/filter.lua).
local function member_meta(member)
  local props = {}
  if string.byte(member, 1) ~= 0 or struct.unpack(">I4", member, 2) ~= EXTENDED then
    return nil, props
  end
  local flags = string.byte(member, 6)
  local at = 7
  local tag
  if flags % 2 == 1 then
    at = at + 4 + struct.unpack(">I4", member, at)
  end
  if flags % 4 >= 2 then
    local size = string.byte(member, at)
    tag = string.sub(member, at + 1, at + size)
    at = at + 1 + size
  end
  if flags % 8 >= 4 then
    local stop = at + 4 + struct.unpack(">I4", member, at)
    at = at + 4
    while at < stop do
      local n = string.byte(member, at)
      local name = string.sub(member, at + 1, at + n)
      local kind = string.sub(member, at + 1 + n, at + 1 + n)
      local size = struct.unpack(">I4", member, at + 2 + n)
      props[name] = PROPERTY_KINDS[kind](string.sub(member, at + 6 + n, at + 5 + n + size))
      at = at + 6 + n + size
    end
  end
  return tag, props
end
