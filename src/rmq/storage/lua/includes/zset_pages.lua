--[[
  A zset read in order a page at a time, for a script that usually needs only its first
  entries (claim_heads.lua walks the heads index so). Nothing may write the zset while it
  is read: the pages are taken by rank.

  new_pages(key, page) starts at the first entry; pages_peek(p) returns the next entry's
  member and score (nil when none is left) without moving on; pages_skip(p) moves on.

  Provides: new_pages, pages_peek, pages_skip.  Needs: rcall.
]]

local function new_pages(key, page)
  return {key = key, page = page, entries = {}, at = 1, offset = 0, done = false}
end

local function pages_peek(p)
  if p.at > #p.entries then
    if p.done then
      return nil
    end
    p.entries = rcall("ZRANGE", p.key, p.offset, p.offset + p.page - 1, "WITHSCORES")
    p.offset = p.offset + p.page
    p.at = 1
    p.done = #p.entries < 2 * p.page
    if #p.entries == 0 then
      return nil
    end
  end
  return p.entries[p.at], tonumber(p.entries[p.at + 1])
end

local function pages_skip(p)
  p.at = p.at + 2
end
