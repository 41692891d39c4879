--[[
  A group's filter, evaluated on a message's tag and properties (includes/member.lua): the
  program rmq/filters.py compiled at bind time, a tree of JSON arrays decoded by cjson, of
  nodes {"and", a, b, ...}, {"or", ...}, {"not", a}, {"cmp", op, x, y},
  {"between", x, lo, hi}, {"in", x, {v, ...}}, {"null", x}, {"const", bool},
  {"tags", {name, ...}} over operands {"p", name}, {"tag"}, {"v", value}.
  Three-valued: a node is true, false or nil (UNKNOWN); a message passes only on true. A
  missing property or tag is NULL (nil); comparing with NULL, comparing values of different
  types, or ordering non-numbers is UNKNOWN. rmq/filters.py's evaluate is the Python twin.

  compile_filter turns the tree into Lua closures once per script call, so that each of the
  call's messages costs a few calls and no table lookups by node kind.

  Provides: compile_filter.  Needs: nothing.
]]
local ORDERINGS = {
  ["<"] = function(a, b) return a < b end,
  ["<="] = function(a, b) return a <= b end,
  [">"] = function(a, b) return a > b end,
  [">="] = function(a, b) return a >= b end,
}

local function compile_operand(node)
  local kind, value = node[1], node[2]
  if kind == "v" then
    return function() return value end
  elseif kind == "p" then
    return function(_, props) return props[value] end
  end
  return function(tag) return tag end
end

-- a op b for two values already known to be present
local function comparison(op)
  if op == "=" then
    return function(a, b)
      if type(a) ~= type(b) then return nil end
      return a == b
    end
  elseif op == "<>" then
    return function(a, b)
      if type(a) ~= type(b) then return nil end
      return a ~= b
    end
  end
  local order = ORDERINGS[op]
  return function(a, b)
    if type(a) ~= "number" or type(b) ~= "number" then return nil end
    return order(a, b)
  end
end

local compile

-- AND (decisive = false) or OR (decisive = true) of the terms, three-valued
local function compile_terms(node, decisive)
  local terms = {}
  for i = 2, #node do
    terms[#terms + 1] = compile(node[i])
  end
  local n = #terms
  return function(tag, props)
    local unknown = false
    for i = 1, n do
      local value = terms[i](tag, props)
      if value == decisive then
        return decisive
      elseif value == nil then
        unknown = true
      end
    end
    if unknown then return nil end
    return not decisive
  end
end

-- property op literal, the usual comparison, as one closure
local function compare_property(op, name, literal)
  local literal_type = type(literal)
  if op == "=" or op == "<>" then
    local equal = op == "="
    return function(_, props)
      local a = props[name]
      if a == nil or type(a) ~= literal_type then return nil end
      return (a == literal) == equal
    end
  end
  if literal_type ~= "number" then
    return function() return nil end
  end
  local order = ORDERINGS[op]
  return function(_, props)
    local a = props[name]
    if type(a) ~= "number" then return nil end
    return order(a, literal)
  end
end

compile = function(node)
  local kind = node[1]
  if kind == "cmp" and node[3][1] == "p" and node[4][1] == "v" then
    return compare_property(node[2], node[3][2], node[4][2])
  elseif kind == "cmp" then
    local test, left, right = comparison(node[2]), compile_operand(node[3]),
      compile_operand(node[4])
    return function(tag, props)
      local a, b = left(tag, props), right(tag, props)
      if a == nil or b == nil then return nil end
      return test(a, b)
    end
  elseif kind == "and" then
    return compile_terms(node, false)
  elseif kind == "or" then
    return compile_terms(node, true)
  elseif kind == "not" then
    local inner = compile(node[2])
    return function(tag, props)
      local value = inner(tag, props)
      if value == nil then return nil end
      return not value
    end
  elseif kind == "between" then
    local x, low, high = compile_operand(node[2]), compile_operand(node[3]),
      compile_operand(node[4])
    local at_least, at_most = comparison(">="), comparison("<=")
    return function(tag, props)
      local v, lo, hi = x(tag, props), low(tag, props), high(tag, props)
      local above, below  -- nil: UNKNOWN
      if v ~= nil and lo ~= nil then
        above = at_least(v, lo)
      end
      if v ~= nil and hi ~= nil then
        below = at_most(v, hi)
      end
      if above == false or below == false then return false end
      if above == nil or below == nil then return nil end
      return true
    end
  elseif kind == "in" then
    -- x = v1 OR x = v2 ...: TRUE on a match; else UNKNOWN if some v is of another type
    -- than x (that comparison is UNKNOWN), FALSE if all are of x's type
    local x, members, only = compile_operand(node[2]), {}, nil
    for i, literal in ipairs(node[3]) do
      local value = literal[2]
      members[value] = true
      if i == 1 then
        only = type(value)
      elseif type(value) ~= only then
        only = false
      end
    end
    return function(tag, props)
      local v = x(tag, props)
      if v == nil then return nil end
      if members[v] then return true end
      if type(v) == only then return false end
      return nil
    end
  elseif kind == "null" then
    local x = compile_operand(node[2])
    return function(tag, props) return x(tag, props) == nil end
  elseif kind == "const" then
    local value = node[2]
    return function() return value end
  elseif kind == "tags" then
    local names = {}
    for _, name in ipairs(node[2]) do
      names[name] = true
    end
    return function(tag) return tag ~= nil and names[tag] == true end
  end
  error("rmq: not a filter program node: " .. tostring(kind))
end

-- The filter as a function of (tag, props) that is true when the message passes.
local function compile_filter(program)
  local evaluate = compile(program)
  return function(tag, props) return evaluate(tag, props) == true end
end
