"""Server-side filters of a group's binding: a tag expression and a ``where`` expression.

``compile_filter`` parses both (a small recursive-descent parser; errors raise
``InvalidFilter`` with the column) into one *program*: a tree of JSON arrays that the send
script evaluates (``storage/lua/includes/filter.lua``) and that :meth:`Filter.matches`
evaluates the same way in Python. No code is ever built from the user's text.

Semantics (docs/semantics.md, "Tags, properties and filters"): a missing property (or a
missing tag) is NULL; a comparison with NULL, or between values of different types (number,
string, bool), or an ordering (``< <= > >= BETWEEN``) of non-numbers, is UNKNOWN; ``AND``,
``OR`` and ``NOT`` follow SQL's three-valued logic; a message passes only if the whole
filter is TRUE.

Program nodes: ``["and", a, b, ...]``, ``["or", a, b, ...]``, ``["not", a]``,
``["cmp", op, x, y]``, ``["between", x, lo, hi]``, ``["in", x, [v, ...]]``,
``["null", x]``, ``["const", bool]``, ``["tags", [name, ...]]``; operands ``["p", name]``,
``["tag"]``, ``["v", value]``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, NoReturn

from .errors import InvalidFilter
from .properties import KEYWORDS, MAX_EXACT_INT, PropertyValue, check_tag

__all__ = ["Filter", "compile_filter", "evaluate"]

MAX_EXPRESSION = 4096  # characters of a where expression
MAX_DEPTH = 32  # nested parentheses and NOTs
_TOKEN = re.compile(r"""
    (?P<space>\s+)
  | (?P<number>-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)
  | (?P<string>'(?:[^']|'')*')
  | (?P<word>[A-Za-z_][A-Za-z0-9_]*)
  | (?P<op><>|<=|>=|=|<|>|\(|\)|,)
""", re.VERBOSE | re.ASCII)  # ASCII digits, spaces and letters only, as documented
_SPACES = " \t\n\r\f\v"  # what separates tokens (str.strip() would take any Unicode space)
_INTEGER = re.compile(r"-?[0-9]+")
_COMPARISONS = frozenset({"=", "<>", "<", "<=", ">", ">="})
_OPERAND = "a value (a number, a 'string', TRUE, FALSE, a property name or TAG)"


@dataclass(frozen=True, slots=True)
class Filter:
    """A group's filters as bound: the expressions as given (None: no filter) and the
    program the send script runs ("" when nothing is filtered)."""

    tags: str | None = None
    where: str | None = None
    program: str = ""

    def matches(self, tag: str | None, properties: Mapping[str, PropertyValue]) -> bool:
        """Whether a message with ``tag`` and ``properties`` is stored for this group."""
        return not self.program or evaluate(json.loads(self.program), tag, properties) is True

    def notes(self) -> list[str]:
        """What the ``where`` expression does that its writer may not mean, in words, one
        note each; nothing is refused for it. Today: a comparison of two properties, which
        ``region = eu`` is (a bare word is a property name; ``'eu'`` is a string)."""
        found: list[str] = []
        if self.program:
            _note_property_pairs(json.loads(self.program), found)
        return found


def _note_property_pairs(node: Any, found: list[str]) -> None:
    if not isinstance(node, list) or not node:
        return
    if node[0] == "cmp" and node[2][0] == "p" and node[3][0] == "p":
        left, op, right = node[2][1], node[1], node[3][1]
        note = (f"{right} is read as a property name ({left} {op} {right} compares two "
                f"properties); quote a string: {left} {op} '{right}'")
        if note not in found:
            found.append(note)
        return
    for child in node[1:]:
        _note_property_pairs(child, found)


def compile_filter(tags: object = None, where: object = None) -> Filter:
    """Parse ``tags`` (``"*"`` or ``"a || b"``) and ``where`` (the SQL-92 subset); raises
    InvalidFilter naming the column of the first problem."""
    nodes: list[Any] = []
    tag_source = _check_source("tag expression", tags)
    where_source = _check_source("where expression", where)
    if tag_source is not None:
        names = _parse_tags(tag_source)
        if names:
            nodes.append(["tags", names])
    if where_source is not None:
        nodes.append(_Parser(where_source).parse())
    if not nodes:
        program = ""
    else:
        program = json.dumps(nodes[0] if len(nodes) == 1 else ["and", *nodes],
                             separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return Filter(tag_source, where_source, program)


def _check_source(what: str, source: object) -> str | None:
    if source is None:
        return None
    if not isinstance(source, str):
        raise InvalidFilter(what, repr(source), 1, "a string", type(source).__name__)
    if len(source) > MAX_EXPRESSION:
        raise InvalidFilter(what, source[:40] + "...", MAX_EXPRESSION + 1,
                            f"at most {MAX_EXPRESSION} characters", f"{len(source)}")
    if not source.strip(_SPACES):
        raise InvalidFilter(what, source, 1, "an expression", "nothing")
    try:
        source.encode("utf-8")
    except UnicodeEncodeError as exc:  # a lone surrogate: no text Redis could store
        raise InvalidFilter(what, source, exc.start + 1, "text encodable as UTF-8",
                            repr(source[exc.start])) from None
    return source


def _parse_tags(source: str) -> list[str]:
    """The tag names of ``a || b``; [] for ``*`` (every message, tagged or not)."""
    if source.strip(_SPACES) == "*":
        return []
    names: list[str] = []
    column = 1
    for part in source.split("||"):
        name = part.strip(_SPACES)
        at = column + len(part) - len(part.lstrip(_SPACES))
        try:
            check_tag(name)
        except ValueError:
            raise InvalidFilter("tag expression", source, at,
                                "a tag (1-128 characters of A-Z a-z 0-9 . _ -) or '*' alone",
                                repr(name) if name else "nothing") from None
        if name not in names:
            names.append(name)
        column += len(part) + 2
    return names


class _Parser:
    """where := or; or := and (OR and)*; and := not (AND not)*; not := NOT not | primary;
    primary := '(' where ')' | operand [comparison]; comparison := op operand
    | [NOT] BETWEEN operand AND operand | [NOT] IN '(' literal, ... ')' | IS [NOT] NULL."""

    def __init__(self, source: str) -> None:
        self.source = source
        self.tokens = list(self._tokens(source))
        self.at = 0
        self.depth = 0

    def _tokens(self, source: str) -> list[tuple[str, str, int]]:
        """(kind, text, column) of each token, then ("end", "", column)."""
        tokens, position = [], 0
        while position < len(source):
            match = _TOKEN.match(source, position)
            if match is None:
                self._fail(position + 1, "a value, an operator or a parenthesis",
                           repr(source[position]))
            kind = match.lastgroup or ""
            if kind != "space":
                text = match.group()
                if kind == "word" and text.upper() in KEYWORDS:
                    kind, text = "keyword", text.upper()
                tokens.append((kind, text, position + 1))
            position = match.end()
        tokens.append(("end", "", len(source) + 1))
        return tokens

    def _fail(self, column: int, expected: str, found: str) -> NoReturn:
        raise InvalidFilter("where expression", self.source, column, expected, found)

    def _peek(self) -> tuple[str, str, int]:
        return self.tokens[self.at]

    def _take(self, kind: str, text: str | None = None) -> bool:
        token_kind, token_text, _ = self.tokens[self.at]
        if token_kind == kind and (text is None or token_text == text):
            self.at += 1
            return True
        return False

    def _expect(self, kind: str, text: str, expected: str) -> None:
        if not self._take(kind, text):
            self._unexpected(expected)

    def _unexpected(self, expected: str) -> NoReturn:
        kind, text, column = self._peek()
        self._fail(column, expected, "the end" if kind == "end" else repr(text))

    def parse(self) -> Any:
        node = self._or()
        if self._peek()[0] != "end":
            self._unexpected("AND, OR or the end")
        return node

    def _or(self) -> Any:
        terms = [self._and()]
        while self._take("keyword", "OR"):
            terms.append(self._and())
        return terms[0] if len(terms) == 1 else ["or", *terms]

    def _and(self) -> Any:
        terms = [self._not()]
        while self._take("keyword", "AND"):
            terms.append(self._not())
        return terms[0] if len(terms) == 1 else ["and", *terms]

    def _nested(self) -> None:
        """Enter a NOT or a parenthesis (the token about to be taken)."""
        self.depth += 1
        if self.depth > MAX_DEPTH:
            self._unexpected(f"at most {MAX_DEPTH} nested NOTs and parentheses")
        self.at += 1

    def _not(self) -> Any:
        kind, text, _ = self._peek()
        if (kind, text) == ("keyword", "NOT"):
            self._nested()
            node = ["not", self._not()]
            self.depth -= 1
            return node
        if (kind, text) == ("op", "("):
            self._nested()
            node = self._or()
            self._expect("op", ")", "')', AND or OR")
            self.depth -= 1
            return node
        return self._predicate()

    def _predicate(self) -> Any:
        left = self._operand()
        kind, text, _ = self._peek()
        if kind == "op" and text in _COMPARISONS:
            self.at += 1
            return ["cmp", text, left, self._operand()]
        if self._take("keyword", "IS"):
            negated = self._take("keyword", "NOT")
            self._expect("keyword", "NULL", "NULL" if negated else "NOT or NULL")
            return ["not", ["null", left]] if negated else ["null", left]
        negated = self._take("keyword", "NOT")
        if self._take("keyword", "BETWEEN"):
            low = self._operand()
            self._expect("keyword", "AND", "AND (of BETWEEN x AND y)")
            node = ["between", left, low, self._operand()]
        elif self._take("keyword", "IN"):
            node = ["in", left, self._list()]
        elif negated:
            return self._unexpected("BETWEEN or IN")
        elif left[0] == "v" and isinstance(left[1], bool):
            return ["const", left[1]]
        else:
            return self._unexpected("a comparison (= <> < <= > >=), BETWEEN, IN or IS")
        return ["not", node] if negated else node

    def _list(self) -> list[Any]:
        self._expect("op", "(", "'(' opening the IN list")
        values = [self._literal()]
        while self._take("op", ","):
            values.append(self._literal())
        self._expect("op", ")", "',' or ')' closing the IN list")
        return values

    def _literal(self) -> Any:
        node = self._operand()
        if node[0] != "v":
            self.at -= 1
            self._unexpected("a literal (a number, a 'string', TRUE or FALSE)")
        return node

    def _operand(self) -> Any:
        kind, text, column = self._peek()
        if kind == "word":
            self.at += 1
            return ["p", text]
        if kind == "keyword" and text == "TAG":
            self.at += 1
            return ["tag"]
        if kind == "keyword" and text in ("TRUE", "FALSE"):
            self.at += 1
            return ["v", text == "TRUE"]
        if kind == "string":
            self.at += 1
            return ["v", text[1:-1].replace("''", "'")]
        if kind == "number":
            self.at += 1
            return ["v", self._number(text, column)]
        return self._unexpected(_OPERAND)

    def _number(self, text: str, column: int) -> int | float:
        if _INTEGER.fullmatch(text):
            value = int(text)
            if abs(value) > MAX_EXACT_INT:
                self._fail(column, "an integer within +-2**53", text)
            return value
        number = float(text)
        if number in (float("inf"), float("-inf")):
            self._fail(column, "a finite number", text)
        return number


def evaluate(node: Any, tag: str | None, properties: Mapping[str, PropertyValue]) -> bool | None:
    """The value of a program node: True, False, or None for UNKNOWN (the Python twin of
    ``lua/includes/filter.lua``)."""
    kind = node[0]
    if kind in ("and", "or"):
        decisive = kind == "or"  # the value that decides the whole: TRUE for OR
        unknown = False
        for term in node[1:]:
            value = evaluate(term, tag, properties)
            if value is decisive:
                return decisive
            unknown = unknown or value is None
        return None if unknown else not decisive
    if kind == "not":
        value = evaluate(node[1], tag, properties)
        return None if value is None else not value
    if kind == "cmp":
        return _compare(node[1], _value(node[2], tag, properties),
                        _value(node[3], tag, properties))
    if kind == "between":
        x = _value(node[1], tag, properties)
        return evaluate(["and", ["const", _compare(">=", x, _value(node[2], tag, properties))],
                         ["const", _compare("<=", x, _value(node[3], tag, properties))]],
                        tag, properties)
    if kind == "in":
        x = _value(node[1], tag, properties)
        return evaluate(["or", *(["const", _compare("=", x, _value(v, tag, properties))]
                                 for v in node[2])], tag, properties)
    if kind == "null":
        return _value(node[1], tag, properties) is None
    if kind == "const":
        result: bool | None = node[1]
        return result
    if kind == "tags":
        return tag is not None and tag in node[1]
    raise ValueError(f"not a filter program node: {node!r}")


def _value(node: Any, tag: str | None,
           properties: Mapping[str, PropertyValue]) -> PropertyValue | None:
    if node[0] == "v":
        value: PropertyValue = node[1]
        return value
    if node[0] == "tag":
        return tag
    return properties.get(node[1])


def _kind(value: PropertyValue) -> str:
    if isinstance(value, bool):
        return "bool"
    return "string" if isinstance(value, str) else "number"


def _compare(op: str, left: PropertyValue | None, right: PropertyValue | None) -> bool | None:
    if left is None or right is None or _kind(left) != _kind(right):
        return None
    if op == "=":
        return left == right
    if op == "<>":
        return left != right
    if _kind(left) != "number":
        return None  # only numbers are ordered
    a, b = float(left), float(right)  # as the send script compares them: doubles
    return {"<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b}[op]
