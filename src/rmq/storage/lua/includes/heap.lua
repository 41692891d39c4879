--[[
  A binary min-heap of (value, item) pairs, as two flat arrays compared inline (a claim's
  merge runs it a few hundred times per call, and a table per entry or a comparator call
  per step would cost). new_heap() makes one: h.v[1] is the least value, h.s[1] its item,
  h.n the count. heap_push(h, item, value) adds; heap_pop(h) drops the least;
  heap_sift_down(h, at) restores the order after h.v[at] grew (the caller writes it).

  Provides: new_heap, heap_push, heap_pop, heap_sift_down.  Needs: nothing.
]]

local function new_heap()
  return {v = {}, s = {}, n = 0}
end

local function heap_sift_down(h, at)
  local hv, hs, n = h.v, h.s, h.n
  local v, i = hv[at], hs[at]
  while true do
    local l = 2 * at
    if l > n then
      break
    end
    if l < n and hv[l + 1] < hv[l] then
      l = l + 1
    end
    if hv[l] >= v then
      break
    end
    hv[at], hs[at] = hv[l], hs[l]
    at = l
  end
  hv[at], hs[at] = v, i
end

local function heap_push(h, item, v)
  local hv, hs = h.v, h.s
  h.n = h.n + 1
  local at = h.n
  while at > 1 do
    local parent = math.floor(at / 2)
    if hv[parent] <= v then
      break
    end
    hv[at], hs[at] = hv[parent], hs[parent]
    at = parent
  end
  hv[at], hs[at] = v, item
end

local function heap_pop(h)
  local hv, hs, n = h.v, h.s, h.n
  hv[1], hs[1] = hv[n], hs[n]
  hv[n], hs[n] = nil, nil
  h.n = n - 1
  if h.n > 0 then
    heap_sift_down(h, 1)
  end
end
