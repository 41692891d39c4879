--[[
  One command over a long argument list, in pieces: Lua's unpack() fails somewhere near 8000
  values, and a claim may write 10000 messages. Pieces hold an even count, so (score, member)
  and (field, value) pairs stay whole. Returns the replies of array-replying commands
  (ZMSCORE, HMGET) joined in order.

  Provides: bulk.  Needs: rcall.
]]
local BULK_PIECE = 1000

local function bulk(command, key, args)
  if #args == 0 then
    return {}
  end
  if #args <= BULK_PIECE then  -- most calls: the reply as it is, not copied
    local reply = rcall(command, key, unpack(args))
    return type(reply) == "table" and reply or {}
  end
  local joined = {}
  for from = 1, #args, BULK_PIECE do
    local reply = rcall(command, key, unpack(args, from, math.min(from + BULK_PIECE - 1, #args)))
    if type(reply) == "table" then
      for _, value in ipairs(reply) do
        joined[#joined + 1] = value
      end
    end
  end
  return joined
end
