--[[
  A group's filter, evaluated on a message's tag and properties (includes/member.lua): the
  program rmq/filters.py compiled at bind time, a tree of JSON arrays decoded by cjson, of
  nodes {"and", a, b, ...}, {"or", ...}, {"not", a}, {"cmp", op, x, y},
  {"between", x, lo, hi}, {"in", x, {v, ...}}, {"null", x}, {"const", bool},
  {"tags", {name, ...}} over operands {"p", name}, {"tag"}, {"v", value}.
  Three-valued: a node is true, false or nil (UNKNOWN); a message passes only on true. A
  missing property or tag is NULL (nil); comparing with NULL, comparing values of different
  types, or ordering non-numbers is UNKNOWN. rmq/filters.py's evaluate is the Python twin.

  Provides: filter_passes.  Needs: nothing.
]]
local compare_ops = {
  ["="] = function(a, b) return a == b end,
  ["<>"] = function(a, b) return a ~= b end,
  ["<"] = function(a, b) return a < b end,
  ["<="] = function(a, b) return a <= b end,
  [">"] = function(a, b) return a > b end,
  [">="] = function(a, b) return a >= b end,
}
local ORDERED = {["<"] = true, ["<="] = true, [">"] = true, [">="] = true}

local function operand(node, tag, props)
  local kind = node[1]
  if kind == "v" then
    return node[2]
  elseif kind == "p" then
    return props[node[2]]
  end
  return tag
end

local function compare(op, a, b)
  if a == nil or b == nil or type(a) ~= type(b) then
    return nil
  end
  if ORDERED[op] and type(a) ~= "number" then
    return nil
  end
  return compare_ops[op](a, b)
end

-- AND (decisive = false) or OR (decisive = true) of n three-valued values (a nil is one:
-- hence the count, which ipairs would stop at).
local function combine(decisive, values, n)
  local unknown = false
  for i = 1, n do
    local value = values[i]
    if value == decisive then
      return decisive
    end
    if value == nil then
      unknown = true
    end
  end
  if unknown then
    return nil
  end
  return not decisive
end

local evaluate

local function evaluate_terms(node, tag, props, decisive)
  local unknown = false
  for i = 2, #node do
    local value = evaluate(node[i], tag, props)
    if value == decisive then
      return decisive
    end
    if value == nil then
      unknown = true
    end
  end
  if unknown then
    return nil
  end
  return not decisive
end

evaluate = function(node, tag, props)
  local kind = node[1]
  if kind == "cmp" then
    return compare(node[2], operand(node[3], tag, props), operand(node[4], tag, props))
  elseif kind == "and" then
    return evaluate_terms(node, tag, props, false)
  elseif kind == "or" then
    return evaluate_terms(node, tag, props, true)
  elseif kind == "not" then
    local value = evaluate(node[2], tag, props)
    if value == nil then
      return nil
    end
    return not value
  elseif kind == "between" then
    local x = operand(node[2], tag, props)
    return combine(false, {compare(">=", x, operand(node[3], tag, props)),
                           compare("<=", x, operand(node[4], tag, props))}, 2)
  elseif kind == "in" then
    local x = operand(node[2], tag, props)
    local values = {}
    for i, v in ipairs(node[3]) do
      values[i] = compare("=", x, operand(v, tag, props))
    end
    return combine(true, values, #node[3])
  elseif kind == "null" then
    return operand(node[2], tag, props) == nil
  elseif kind == "const" then
    return node[2]
  elseif kind == "tags" then
    for _, name in ipairs(node[2]) do
      if name == tag then
        return true
      end
    end
    return false
  end
  error("rmq: not a filter program node: " .. tostring(kind))
end

local function filter_passes(program, tag, props)
  return evaluate(program, tag, props) == true
end
