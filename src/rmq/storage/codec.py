"""Encodings of members, scores and records; the Python side of ``lua/includes``.

``docs/storage.md`` is the reference; the Lua includes ``scores``, ``member`` and ``records``
must agree with this module; the snapshot tests (``tests/test_snapshot.py``) read what the
scripts wrote through it.
"""

from __future__ import annotations

import struct
from bisect import bisect_right
from collections.abc import Iterable, Mapping
from typing import Any, NamedTuple

from ..message import PropertyValue

__all__ = [
    "EPOCH_MS",
    "encode_member",
    "decode_member",
    "merge_identity",
    "MemberParts",
    "decode_parts",
    "DECODE_ERRORS",
    "decode_problem",
    "encode_properties",
    "EXTENDED_PREFIX",
    "ready_priority",
    "ready_due",
    "delayed_due",
    "delayed_priority",
    "lease_until",
    "LeaseEnds",
    "run_leases",
    "InflightRecord",
    "DeadRecord",
    "parse_inflight",
    "parse_dead",
    "scored_pairs",
    "to_ms",
]

EPOCH_MS = 1_704_067_200_000  # 2024-01-01T00:00:00Z
_BAND = 2**46
_SUB = 32
_LEASE_SUB = 1024
_LEASE_SHIFT = 2**52
_NO_KEY = 0xFFFFFFFF
_LEN = struct.Struct(">I")


def to_ms(seconds: float) -> int:
    """A duration of the settings (seconds) as the scripts take it: whole milliseconds."""
    return int(round(seconds * 1000))


_EXTENDED = 0xFFFFFFFE  # the length that announces the extended form
EXTENDED_PREFIX = b"\x00" + _LEN.pack(_EXTENDED)  # how every extended member starts
_HAS_KEY, _HAS_TAG, _HAS_PROPERTIES = 1, 2, 4
_KINDS = {"s": str, "i": int, "f": float, "b": bool}


def encode_member(body: bytes, key: bytes | None, tag: str | None = None,
                  properties: bytes = b"") -> bytes:
    """The zset member of a message: its body, prefixed by its key when it has one, or, when
    it has a tag or properties, the extended form (docs/storage.md, "Members").

    Plain bodies are stored as they are, so a pending message costs its body plus the zset
    entry. The prefix starts with a NUL byte, so a body that itself starts with NUL is
    prefixed too (with the "no key" length) to stay unambiguous. ``properties`` is
    ``encode_properties``'s canonical form, so equal messages give equal members and merge.
    """
    if tag is not None or properties:
        flags = (_HAS_KEY if key is not None else 0) | (_HAS_TAG if tag is not None else 0) \
            | (_HAS_PROPERTIES if properties else 0)
        parts = [b"\x00", _LEN.pack(_EXTENDED), bytes((flags,))]
        if key is not None:
            parts += (_LEN.pack(len(key)), key)
        if tag is not None:
            raw = tag.encode("ascii")
            parts += (bytes((len(raw),)), raw)
        if properties:
            parts += (_LEN.pack(len(properties)), properties)
        parts.append(body)
        return b"".join(parts)
    if key is None:
        if body[:1] != b"\x00":
            return body
        return b"\x00" + _LEN.pack(_NO_KEY) + body
    return b"\x00" + _LEN.pack(len(key)) + key + body


def encode_properties(pairs: Iterable[tuple[str, PropertyValue]]) -> bytes:
    """Properties (checked, sorted by name) as stored in a member: per property, u8 name
    length, name, a kind letter (``s``, ``i``, ``f``, ``b``), u32 value length, value text
    (UTF-8; ints in decimal, floats as Python's repr, bools ``1``/``0``)."""
    out: list[bytes] = []
    for name, value in pairs:
        if isinstance(value, bool):
            kind, text = "b", "1" if value else "0"
        elif isinstance(value, int):
            kind, text = "i", str(value)
        elif isinstance(value, float):
            kind, text = "f", repr(value)
        else:
            kind, text = "s", value
        raw_name, raw = name.encode("ascii"), text.encode("utf-8")
        out += (bytes((len(raw_name),)), raw_name, kind.encode(), _LEN.pack(len(raw)), raw)
    return b"".join(out)


def _decode_properties(raw: bytes) -> dict[str, PropertyValue]:
    properties: dict[str, PropertyValue] = {}
    at = 0
    while at < len(raw):
        n = raw[at]
        name = raw[at + 1 : at + 1 + n].decode("ascii")
        kind = chr(raw[at + 1 + n])
        (size,) = _LEN.unpack_from(raw, at + 2 + n)
        text = raw[at + 6 + n : at + 6 + n + size].decode("utf-8")
        at += 6 + n + size
        if kind == "b":
            properties[name] = text == "1"
        else:
            properties[name] = _KINDS[kind](text)
    return properties


class MemberParts(NamedTuple):
    body: bytes
    key: bytes | None
    tag: str | None
    properties: Mapping[str, PropertyValue]


def decode_parts(member: bytes) -> MemberParts:
    """Everything a member holds: body, key, tag and properties."""
    if member[:1] != b"\x00":
        return MemberParts(member, None, None, {})
    (n,) = _LEN.unpack_from(member, 1)
    if n != _EXTENDED:
        body, key = decode_member(member)
        return MemberParts(body, key, None, {})
    flags, at = member[5], 6
    key = tag = None
    properties: Mapping[str, PropertyValue] = {}
    if flags & _HAS_KEY:
        (size,) = _LEN.unpack_from(member, at)
        key, at = member[at + 4 : at + 4 + size], at + 4 + size
    if flags & _HAS_TAG:
        size = member[at]
        tag, at = member[at + 1 : at + 1 + size].decode("ascii"), at + 1 + size
    if flags & _HAS_PROPERTIES:
        (size,) = _LEN.unpack_from(member, at)
        properties, at = _decode_properties(member[at + 4 : at + 4 + size]), at + 4 + size
    return MemberParts(member[at:], key, tag, properties)


# What decode_parts raises on a member no send writes (another program's, or damaged): cut
# short (struct.error, IndexError), a property of an unknown kind (KeyError), text that is
# not ASCII or UTF-8, or a number that is not one (ValueError).
DECODE_ERRORS = (ValueError, IndexError, KeyError, struct.error)


def decode_problem(error: BaseException) -> str:
    """The error a message that ``decode_parts`` refused is dead-lettered with."""
    return f"cannot decode the stored message: {type(error).__name__}: {error}"


def decode_member(member: bytes) -> tuple[bytes, bytes | None]:
    """(body, key) of a member; key is None when the message has none."""
    if member[:1] != b"\x00":
        return member, None
    (n,) = _LEN.unpack_from(member, 1)
    if n == _NO_KEY:
        return member[5:], None
    if n == _EXTENDED:
        body, key, _, _ = decode_parts(member)
        return body, key
    return member[5 + n :], member[5 : 5 + n]


def merge_identity(member: bytes) -> bytes:
    """What a topic merging by key merges a stored message by, and its message id hashes:
    its key, else its body (``lua/includes/member.lua``'s ``member_key``; a member that
    cannot be decoded is its own identity, as there)."""
    try:
        body, key = decode_member(member)
    except DECODE_ERRORS:
        return member
    return body if key is None else key


def ready_priority(score: float) -> int:
    return 127 - int(score) // _BAND


def ready_due(score: float) -> int:
    return EPOCH_MS + (int(score) % _BAND) // _SUB


def delayed_due(score: float) -> int:
    return int(score) // 256


def delayed_priority(score: float) -> int:
    return 255 - int(score) % 256


def lease_until(score: float) -> int:
    """Epoch ms a lease runs until, from its score ``-(until * 1024 + id % 1024) - 2**52``
    (an earlier version's lease per id: without the ``- 2**52``; ``lua/includes/scores``)."""
    shifted = -int(score)
    if shifted >= _LEASE_SHIFT:
        shifted -= _LEASE_SHIFT
    return shifted // _LEASE_SUB


class LeaseEnds:
    """When each in-flight delivery's lease ends, from one slot's leases (``(member, score)``
    pairs): a claim's share has one lease, member ``b"first:last"``, and an extended delivery
    one of its own, its bare id, which decides for it (``lua/includes/leases.lua``). Only
    readers use it; a lease member that is no id or range (damaged) is left out."""

    def __init__(self, pairs: Iterable[tuple[bytes, float]]) -> None:
        self._own: dict[int, int] = {}
        ranges: list[tuple[int, int, int]] = []  # first, last, lease end
        for member, score in pairs:
            first, colon, last = member.partition(b":")
            try:
                if colon:
                    ranges.append((int(first), int(last), lease_until(score)))
                else:
                    self._own[int(member)] = lease_until(score)
            except (ValueError, OverflowError):  # a lease no script writes: covers nothing
                continue
        ranges.sort()
        self._ranges = ranges
        self._firsts = [first for first, _, _ in ranges]

    def __call__(self, delivery: int) -> int | None:
        """The end of ``delivery``'s lease, epoch ms; None when no lease covers it."""
        own = self._own.get(delivery)
        if own is not None:
            return own
        at = bisect_right(self._firsts, delivery) - 1
        if at >= 0 and delivery <= self._ranges[at][1]:
            return self._ranges[at][2]
        return None


def run_leases(seqs: Iterable[int]) -> list[str]:
    """The lease members (``lua/includes/leases.lua``) of the runs of consecutive delivery ids
    in ``seqs`` (in any order): an ack of a claim's whole share names that share's lease,
    which the ack then drops (a run that is no share's whole range names no lease)."""
    runs: list[list[int]] = []  # [first, last] of each run
    for seq in sorted(seqs):
        # sorted: the next id either repeats the last (an ack naming a delivery twice: the
        # run goes on, so a share acknowledged whole is still named whole), follows it, or
        # starts a new run
        if runs and seq - runs[-1][1] <= 1:
            runs[-1][1] = seq
        else:
            runs.append([seq, seq])
    return [f"{first}:{last}" if first != last else f"{first}" for first, last in runs]


class InflightRecord(NamedTuple):
    priority: int
    attempts: int
    due_at: int
    member: bytes
    holder: str | None  # the claimer's id, when it said (a Consumer does)


class DeadRecord(NamedTuple):
    priority: int
    attempts: int
    due_at: int
    dead_at: int
    error: str
    member: bytes


def parse_inflight(record: bytes) -> InflightRecord:
    """An in-flight record (``includes/records.lua``): ``p,a,due,`` then the member, or,
    when the claimer said who it is, ``p,a,due;n,`` then a holder of ``n`` bytes and the
    member."""
    p, a, rest = record.split(b",", 2)
    due, sep, rest = rest.partition(b",")
    if b";" not in due:
        return InflightRecord(int(p), int(a), int(due), rest, None)
    due, size = due.split(b";")
    n = int(size)
    return InflightRecord(int(p), int(a), int(due), rest[n:],
                          rest[:n].decode("utf-8", "replace"))


def parse_dead(record: bytes) -> DeadRecord:
    p, a, due, dead_at, n, rest = record.split(b",", 5)
    size = int(n)
    error = rest[:size].decode("utf-8", "replace")
    return DeadRecord(int(p), int(a), int(due), int(dead_at), error, rest[size:])


def scored_pairs(reply: list[Any]) -> list[tuple[bytes, float]]:
    """(member, score) pairs of a ``ZRANGE ... WITHSCORES`` reply: redis-py 5 leaves the raw
    command's reply flat (member, score text, ...), later versions pair it up."""
    if reply and isinstance(reply[0], list | tuple):
        return [(member, float(score)) for member, score in reply]
    return [(member, float(score)) for member, score in zip(reply[0::2], reply[1::2],
                                                            strict=True)]
