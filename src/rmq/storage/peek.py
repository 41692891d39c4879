"""Reading a few stored messages without changing anything: a page of one state (``peek``)
and the messages of a body or key (``find``), for the console and the command line.

Both read only what they show: ``peek`` learns each slot's size in that state, then reads
the page's ranges (one slot at a time, in the order each state keeps: ready in claim
order, delayed by due time, in flight newest lease first, dead by time of death); ``find``
looks only in the slot a send of that body or key goes to (or every slot when asked).
Like ``snapshot``, a message that changes state during the read may show twice or not at
all. On a topic merging by key (``by_key``) a pending message is its identity in ready or
delayed, its newest value in the group's ``values`` (docs/storage.md): both read it there.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import InvalidQuery
from .calls import Call, Op, command
from .codec import (
    DECODE_ERRORS,
    EXTENDED_PREFIX,
    DeadRecord,
    InflightRecord,
    LeaseEnds,
    decode_member,
    encode_member,
    parse_dead,
    parse_inflight,
    scored_pairs,
)
from .keys import GroupSlotKeys, SlotKeys
from .snapshot import STATES, SnapshotRow, State, stored_row

__all__ = ["PeekPage", "MAX_PAGE", "peek", "find", "scan_all"]

MAX_PAGE = 1000
_SCAN_COUNT = 1000
_GLOB = re.compile(rb"([*?\[\]\\])")


@dataclass(frozen=True, slots=True)
class PeekPage:
    """Messages ``offset`` to ``offset + len(rows)`` of ``total`` in one state of a group
    (of one slot, or of every slot in slot order)."""

    total: int
    offset: int
    rows: list[SnapshotRow]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _index(k: GroupSlotKeys, state: State) -> str:
    """The sorted set that orders one slot's messages in ``state``. Not in flight: a lease
    covers a claim's share, so ``_read_inflight`` orders in-flight deliveries itself."""
    return {"ready": k.ready, "delayed": k.delayed, "dead": k.dead_index}[state]


def _size(k: GroupSlotKeys, state: State) -> Call:
    if state == "in_flight":
        return command("HLEN", k.inflight)
    return command("ZCARD", _index(k, state))


def _check(state: str, slot: int | None, slots: int, offset: int, limit: int) -> State:
    """``state`` as one of :data:`STATES`, once every argument of the page is checked."""
    if state not in STATES:
        raise InvalidQuery(f"state must be one of {', '.join(STATES)}, got {state!r}")
    if slot is not None and (isinstance(slot, bool) or not isinstance(slot, int)
                             or not 0 <= slot < slots):
        raise InvalidQuery(f"slot must be an integer from 0 to {slots - 1}, got {slot!r}")
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise InvalidQuery(f"offset must be a non-negative integer, got {offset!r}")
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise InvalidQuery(f"limit must be an integer from 1 to {MAX_PAGE}, got {limit!r}")
    return STATES[STATES.index(state)]


def peek(topic: str, group: str, state: str, slots: int, slot: int | None, offset: int,
         limit: int, now: int, by_key: bool = False) -> Op[PeekPage]:
    """A page of ``group``'s messages in ``state``; ``slot`` None pages through every slot."""
    known = _check(state, slot, slots, offset, limit)
    chosen = list(range(slots)) if slot is None else [slot]
    keys = {s: SlotKeys(topic, s).group(group) for s in chosen}
    sizes = yield [_size(keys[s], known) for s in chosen]
    ranges: list[tuple[int, int, int]] = []  # slot, first, last (inclusive)
    skip, want = offset, limit
    for s, size in zip(chosen, sizes, strict=True):
        if want == 0:
            break
        if skip >= size:
            skip -= size
            continue
        take = min(size - skip, want)
        ranges.append((s, skip, skip + take - 1))
        skip, want = 0, want - take
    rows: list[SnapshotRow] = []
    if ranges:
        rows = yield from _read_ranges(topic, group, known, keys, ranges, now, by_key)
    return PeekPage(sum(sizes), offset, rows)


def _read_inflight(topic: str, group: str, keys: dict[int, GroupSlotKeys],
                   ranges: list[tuple[int, int, int]], now: int, by_key: bool
                   ) -> Op[list[SnapshotRow]]:
    """In flight, newest lease first (then the latest claimed): a slot's ids and leases are
    read whole to order them, which costs what the slot holds in flight, not the page."""
    replies = yield [call for s, _, _ in ranges for call in
                     (command("HKEYS", keys[s].inflight),
                      command("ZRANGE", keys[s].leases, 0, -1, "WITHSCORES"))]
    pages: list[tuple[int, list[int], LeaseEnds]] = []
    for n, (s, first, last) in enumerate(ranges):
        lease_of = LeaseEnds(scored_pairs(replies[2 * n + 1]))

        def newest_first(delivery: int, lease_of: LeaseEnds = lease_of) -> tuple[int, int]:
            return -(lease_of(delivery) or 0), -delivery

        ids = sorted((int(name) for name in replies[2 * n]), key=newest_first)
        pages.append((s, ids[first:last + 1], lease_of))
    records = yield [command("HMGET", keys[s].inflight, *(ids or [0])) for s, ids, _ in pages]
    rows: list[SnapshotRow] = []
    for (s, ids, lease_of), values in zip(pages, records, strict=True):
        for delivery, value in zip(ids, values, strict=False):
            row = stored_row(topic, group, s, "in_flight", b"%d" % delivery, 0.0, value, now,
                       lease_of(delivery), by_key=by_key)
            if row is not None:
                rows.append(row)
    return rows


def _read_ranges(topic: str, group: str, state: State, keys: dict[int, GroupSlotKeys],
                 ranges: list[tuple[int, int, int]], now: int, by_key: bool
                 ) -> Op[list[SnapshotRow]]:
    if state == "in_flight":
        return (yield from _read_inflight(topic, group, keys, ranges, now, by_key))
    replies = yield [command("ZRANGE", _index(keys[s], state), first, last, "WITHSCORES")
                     for s, first, last in ranges]
    entries = [scored_pairs(reply) for reply in replies]
    lookups = []
    for (s, _, _), found in zip(ranges, entries, strict=True):
        names = [name for name, _ in found] or [b""]
        record = keys[s].dead if state == "dead" else keys[s].attempts
        lookups.append(command("HMGET", record, *names))
        if by_key and state != "dead":
            lookups.append(command("HMGET", keys[s].values, *names))
    details = yield lookups
    if by_key and state != "dead":
        details, stored = details[0::2], details[1::2]
    else:
        stored = [[None] * len(found) for found in entries]
    rows: list[SnapshotRow] = []
    for (s, _, _), found, values, newest in zip(ranges, entries, details, stored, strict=True):
        for (name, score), value, value_stored in zip(found, values, newest, strict=False):
            row = stored_row(topic, group, s, state, name, score, value, now, by_key=by_key,
                       stored=value_stored)
            if row is not None:
                rows.append(row)
    return rows


# -- find -------------------------------------------------------------------------------


def scan_all(calls: dict[Any, tuple[Any, ...]]) -> Op[dict[Any, list[tuple[bytes, Any]]]]:
    """Run every ``(ZSCAN|HSCAN, key[, MATCH, pattern])`` to its end, side by side; returns
    each one's (member, score) or (field, value) pairs."""
    cursors = dict.fromkeys(calls, b"0")
    found: dict[Any, list[tuple[bytes, Any]]] = {name: [] for name in calls}
    while cursors:
        names = list(cursors)
        replies = yield [command(calls[n][0], calls[n][1], cursors[n], *calls[n][2:],
                                 "COUNT", _SCAN_COUNT) for n in names]
        for name, (cursor, elements) in zip(names, replies, strict=True):
            # redis-py answers HSCAN with a dict, ZSCAN with (member, score) pairs
            found[name] += elements.items() if isinstance(elements, dict) else elements
            if int(cursor) == 0:
                del cursors[name]
            else:
                cursors[name] = cursor
    return found


def find(topic: str, groups: Sequence[str], slots: int, body: bytes | None,
         key: bytes | None, every_slot: bool, now: int, by_key: bool = False
         ) -> Op[list[SnapshotRow]]:
    """Every stored message with this ``body`` (and ``key``; without a key only a message
    sent without one matches) or, with no body, every message of ``key``: in the slot a send
    of them goes to, or in ``every_slot``. ``by_key``: the topic merges by key, its pending
    messages are found by their newest values."""
    if body is None and key is None:
        raise InvalidQuery("give a body or a key to find")
    basis = key if key is not None else body
    assert basis is not None
    chosen = range(slots) if every_slot else [zlib.crc32(basis) & (slots - 1)]
    member = None if body is None else encode_member(body, key)
    prefix = _GLOB.sub(rb"\\\1", encode_member(b"", key)) if member is None else b""

    def matches(candidate: bytes) -> bool:
        """Whether to show ``candidate``: it matches, or it cannot be decoded (it may be the
        one looked for: shown as a corrupt row)."""
        try:
            if member is not None:  # whatever tag and properties it was sent with
                return candidate == member or decode_member(candidate) == (body, key)
            return decode_member(candidate)[1] == key
        except DECODE_ERRORS:
            return True

    def holds(record: bytes, parse: Callable[[bytes], InflightRecord | DeadRecord]) -> bool:
        try:
            return matches(parse(record).member)
        except DECODE_ERRORS:  # a damaged record: shown as a corrupt row
            return True

    scans: dict[Any, tuple[Any, ...]] = {}
    for group in groups:
        for s in chosen:
            k = SlotKeys(topic, s).group(group)
            scans[(group, s, "in_flight")] = ("HSCAN", k.inflight)
            scans[(group, s, "dead")] = ("HSCAN", k.dead)
            if by_key:
                # pending values, named by identity (whatever their key and body)
                scans[(group, s, "values")] = ("HSCAN", k.values)
                continue
            if member is None:
                scans[(group, s, "ready")] = ("ZSCAN", k.ready, "MATCH", prefix + b"*")
                scans[(group, s, "delayed")] = ("ZSCAN", k.delayed, "MATCH", prefix + b"*")
            # messages sent with a tag or properties: their members start alike, whatever
            # their key and body (codec.encode_member)
            extended = EXTENDED_PREFIX + b"*"
            scans[(group, s, "ready", "extended")] = ("ZSCAN", k.ready, "MATCH", extended)
            scans[(group, s, "delayed", "extended")] = ("ZSCAN", k.delayed, "MATCH", extended)
            # (HSCAN's MATCH filters field names only: records are checked below)
    pending: list[tuple[str, int, State, bytes, float]] = []
    if member is not None and not by_key:
        targets = [(g, s) for g in groups for s in chosen]
        scores = yield [command(kind, getattr(SlotKeys(topic, s).group(g), state), member)
                        for g, s in targets for kind, state in
                        (("ZSCORE", "ready"), ("ZSCORE", "delayed"))]
        scored: tuple[State, State] = ("ready", "delayed")
        for i, (g, s) in enumerate(targets):
            for state, score in zip(scored, scores[2 * i: 2 * i + 2], strict=True):
                if score is not None:
                    pending.append((g, s, state, member, float(score)))
    scanned = yield from scan_all(scans)
    held: list[tuple[str, int, State, bytes, bytes]] = []
    newest: dict[tuple[str, int, bytes], bytes] = {}  # merging by key: identity -> value
    for (group, s, state, *_), pairs in scanned.items():
        if state == "values":
            newest.update({(group, s, name): value for name, value in pairs if matches(value)})
            continue
        if state in ("ready", "delayed"):
            pending += [(group, s, state, m, float(score)) for m, score in pairs if matches(m)]
            continue
        parse = parse_inflight if state == "in_flight" else parse_dead
        held += [(group, s, state, name, value) for name, value in pairs
                 if holds(value, parse)]
    if newest:
        where = list(newest)
        both: tuple[State, State] = ("ready", "delayed")
        scores = yield [command("ZSCORE", getattr(SlotKeys(topic, s).group(g), state), name)
                        for g, s, name in where for state in both]
        for i, (g, s, name) in enumerate(where):
            for state, score in zip(both, scores[2 * i: 2 * i + 2], strict=True):
                if score is not None:
                    pending.append((g, s, state, name, float(score)))
    leased = sorted({(g, s) for g, s, state, _, _ in held if state == "in_flight"})
    extra = yield [command("HGET", SlotKeys(topic, s).group(g).attempts, m)
                   for g, s, _, m, _ in pending] + [
                  command("ZRANGE", SlotKeys(topic, s).group(g).leases, 0, -1, "WITHSCORES")
                  for g, s in leased]
    rows = [stored_row(topic, g, s, state, m, score, attempts, now, by_key=by_key,
                 stored=newest.get((g, s, m)))
            for (g, s, state, m, score), attempts in zip(pending, extra, strict=False)]
    lease_of = {place: LeaseEnds(scored_pairs(reply))
                for place, reply in zip(leased, extra[len(pending):], strict=True)}
    for g, s, state, name, value in held:
        lease = lease_of[(g, s)](int(name)) if state == "in_flight" else None
        rows.append(stored_row(topic, g, s, state, name, 0.0, value, now, lease, by_key=by_key))
    order = {state: i for i, state in enumerate(STATES)}
    return sorted((r for r in rows if r is not None),
                  key=lambda r: (r.group, order[r.state], r.slot))
