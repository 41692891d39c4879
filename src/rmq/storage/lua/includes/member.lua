--[[
  A zset member is the body itself, or, when the message has a key (or its body starts with
  a NUL byte), "\0" .. u32be(len(key)) .. key .. body, where len 0xFFFFFFFF means "no key".
  The key a message is serialised under (serial topics) is its key, or its body.

  Provides: member_key.  Needs: nothing.
]]
local NO_KEY = 4294967295

local function member_key(member)
  if string.byte(member, 1) ~= 0 then
    return member
  end
  local n = struct.unpack(">I4", member, 2)
  if n == NO_KEY then
    return string.sub(member, 6)
  end
  return string.sub(member, 6, 5 + n)
end
