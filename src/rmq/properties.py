"""A message's tag and properties: what they may be, checked before anything is written.

A tag is one name (1-128 characters of ``A-Z a-z 0-9 . _ -``); properties are at most 64
names (identifiers that are not a filter keyword) mapped to str, int, float or bool. Both
take part in merging and in the groups' filters (``rmq.filters``). Ints are kept within
+-2**53 and floats finite, so that the send script, which compares numbers as doubles,
compares them exactly.
"""

from __future__ import annotations

import math
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
    for name, value in properties.items():
        if not isinstance(name, str) or not is_identifier(name):
            raise InvalidProperties(
                f"invalid property name {name!r}: use an identifier (a letter or _, then "
                f"letters, digits or _, at most 128) that is not one of {sorted(KEYWORDS)}")
        _check_value(name, value)
    return tuple(sorted(properties.items()))


def _check_value(name: str, value: object) -> None:
    if isinstance(value, bool | str):
        if isinstance(value, str):
            try:
                value.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise InvalidProperties(f"property {name!r} is not encodable as UTF-8: "
                                        f"{exc}") from None
        return
    if isinstance(value, int):
        if not -MAX_EXACT_INT <= value <= MAX_EXACT_INT:
            raise InvalidProperties(f"property {name!r}: int {value} is outside +-2**53")
        return
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidProperties(f"property {name!r}: float {value} is not finite")
        return
    raise InvalidProperties(f"property {name!r} must be str, int, float or bool, "
                            f"got {type(value).__name__}")
