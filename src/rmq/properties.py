"""A message's tag and properties: what they may be, checked before anything is written.

A tag is one name (1-128 characters of ``A-Z a-z 0-9 . _ -``); properties are at most 64
names (identifiers that are not a filter keyword) mapped to str, int, float or bool. Both
take part in merging and in the groups' filters (``rmq.filters``). Ints are kept within
+-2**53 and floats finite, so that the send script, which compares numbers as doubles,
compares them exactly. Other numbers (numpy's scalars, ``Fraction``) are stored as the int
(``numbers.Integral``) or float (``numbers.Real``) they equal; anything else, ``Decimal``
included (converting it to a float would round it silently), is refused.
"""

from __future__ import annotations

import math
import numbers
import re
from collections.abc import Mapping

from .errors import InvalidProperties, InvalidTag
from .message import PropertyValue

__all__ = ["PropertyValue", "MAX_PROPERTIES", "KEYWORDS", "check_tag", "check_properties"]

MAX_PROPERTIES = 64
MAX_EXACT_INT = 2**53
# Words of the filter language: a property so named could not be referred to in a filter.
KEYWORDS = frozenset({"AND", "OR", "NOT", "BETWEEN", "IN", "IS", "NULL", "TRUE", "FALSE",
                      "TAG"})
_TAG = re.compile(r"[A-Za-z0-9._-]{1,128}")
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}")


def check_tag(tag: object) -> str | None:
    """``tag`` if it is None or a valid tag; else InvalidTag."""
    if tag is None:
        return None
    if not isinstance(tag, str) or not _TAG.fullmatch(tag):
        raise InvalidTag(f"invalid tag {tag!r}: use 1-128 characters of A-Z a-z 0-9 . _ -")
    return tag


def is_identifier(name: str) -> bool:
    """Whether ``name`` may name a property (and be referred to in a filter)."""
    return bool(_IDENTIFIER.fullmatch(name)) and name.upper() not in KEYWORDS


def check_properties(properties: object) -> tuple[tuple[str, PropertyValue], ...]:
    """The properties as (name, value) pairs sorted by name (their canonical order: equal
    dicts give equal pairs, so their messages merge); () for None or an empty dict. Raises
    InvalidProperties naming the first bad name or value."""
    if properties is None:
        return ()
    if not isinstance(properties, Mapping):
        raise InvalidProperties(f"properties must be a dict of names to values, "
                                f"got {type(properties).__name__}")
    if len(properties) > MAX_PROPERTIES:
        raise InvalidProperties(f"{len(properties)} properties exceed the limit of "
                                f"{MAX_PROPERTIES}")
    pairs = []
    for name, value in properties.items():
        if not isinstance(name, str) or not is_identifier(name):
            raise InvalidProperties(
                f"invalid property name {name!r}: use an identifier (an ASCII letter or _, "
                f"then ASCII letters, digits or _, at most 128) that is not one of "
                f"{sorted(KEYWORDS)}")
        pairs.append((name, _plain_value(name, value)))
    return tuple(sorted(pairs))


def _plain_value(name: str, value: object) -> PropertyValue:
    """``value`` as the exact bool, int, float or str it is stored as: a subclass (numpy's
    float64 is a float) would be stored by its own ``repr``, which no filter matches."""
    if type(value) is bool:
        return value
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidProperties(f"property {name!r} is not encodable as UTF-8: "
                                    f"{exc}") from None
        return value if type(value) is str else str.__str__(value)
    # numbers.Integral and numbers.Real take numpy's scalars, Fraction, IntEnum ...; an
    # exact int or float is checked first, without the ABCs' slower isinstance
    if type(value) is int or (type(value) is not float and isinstance(value, numbers.Integral)):
        number = int(value)
        if not -MAX_EXACT_INT <= number <= MAX_EXACT_INT:
            raise InvalidProperties(f"property {name!r}: int {number} is outside +-2**53")
        return number
    if isinstance(value, float | numbers.Real):
        real = float(value)
        if not math.isfinite(real):
            raise InvalidProperties(f"property {name!r}: float {real} is not finite")
        return real
    kind = type(value)
    kind_name = kind.__qualname__ if kind.__module__ == "builtins" else \
        f"{kind.__module__}.{kind.__qualname__}"
    hint = " (convert it to a float or a str)" if isinstance(value, numbers.Number) else ""
    raise InvalidProperties(f"property {name!r} must be str, int, float or bool, "
                            f"got {kind_name}{hint}")
