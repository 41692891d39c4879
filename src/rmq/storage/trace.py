"""The trace of a topic's messages (docs/trace.md): what the scripts record while the topic's
``trace`` setting is on (``lua/includes/trace.lua``), and reading it back.

A script learns from one argument whether to trace: ``trace_argument`` gives ``""`` for a
topic without the trace (the scripts then do nothing more), else the topic's name, retention
and cap; the slot's trace list and the groups' tallies (``SlotKeys.trace``) then follow the
keys it already takes. Each script call appends its events to the slot's list as one
record, a line each, the messages a line names after it as they are stored (docs/storage.md,
"The trace"); the merges into a pending message are counted in its group's tally, and the
claim that takes it records them. A delivery's later events name its delivery seq only:
``read_trace`` finds them through the ``claimed`` events of the message, and finds the
message by hashing what the records hold into message ids.
"""

from __future__ import annotations

import hashlib
import math
import re
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from typing import Any, Literal

from ..errors import InvalidQuery
from ..message import message_id_of
from ..settings import TopicSettings
from .calls import Call, Op, command, script_call
from .codec import encode_member, to_ms
from .keys import SlotKeys
from .scripts import script

__all__ = ["TraceEvent", "EventName", "EVENTS", "trace_argument", "read_trace", "purge_call",
           "is_message_id", "trace_target"]

EventName = Literal["sent", "merged", "promoted", "claimed", "extended", "acked", "failed",
                    "expired", "released", "dead", "requeued", "purged"]
EVENTS: tuple[EventName, ...] = ("sent", "merged", "promoted", "claimed", "extended", "acked",
                                 "failed", "expired", "released", "dead", "requeued", "purged")
_MESSAGE_ID = re.compile(r"[0-9a-f]{16}")
# Members up to this long are copied into the trace, longer ones named by their id
# (INLINE_MAX in lua/includes/trace_record.lua).
INLINE_MAX = 256


@dataclass(frozen=True, slots=True)
class TraceEvent:
    """One state change of a message in a group, as recorded with Redis's time (epoch ms).

    ``event`` is one of :data:`EVENTS`. ``delivery_id`` (``"slot-seq"``, as
    :attr:`Message.id`) names the delivery it concerns, from ``claimed`` on; ``attempt`` is
    that delivery's attempt (1 on the first); ``consumer`` the id of the consumer that
    claimed it (None when the claim did not say); ``error`` the failure of ``failed``,
    ``expired`` and ``dead``. A ``merged`` event stands for ``count`` sends merged into the
    pending message, the first at ``time`` and the last at ``last_time``.
    """

    event: EventName
    time: int
    group: str
    message_id: str
    slot: int
    delivery_id: str | None = None
    consumer: str | None = None
    attempt: int | None = None
    error: str | None = None
    count: int = 1
    last_time: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def is_message_id(text: object) -> bool:
    """Whether ``text`` has the form of a message id (16 lowercase hex digits)."""
    return isinstance(text, str) and _MESSAGE_ID.fullmatch(text) is not None


def trace_target(topic: str, slots: int, message_id: str | None, body: bytes | None,
                 key: bytes | None) -> tuple[str, bytes | None, list[int]]:
    """Which message a trace asks for (its id, and the member when the query gives it), and
    the slots to read: a ``message_id`` may be in any slot (a send's ``slot_basis`` decides,
    which the id does not hold); a ``body`` (and ``key``: without it, a message sent
    without one) is the message a send of them makes, in the slot such a send goes to.
    InvalidQuery when it names none or two."""
    if message_id is not None:
        if body is not None or key is not None:
            raise InvalidQuery("give a message_id or a body (and key), not both")
        if not is_message_id(message_id):
            raise InvalidQuery(f"not a message id (16 hex digits): {message_id!r}")
        return message_id, None, list(range(slots))
    if body is None:
        raise InvalidQuery("give a message_id, or the body (and key) of the message to trace")
    basis = body if key is None else key
    member = encode_member(body, key)
    return message_id_of(topic, member), member, [zlib.crc32(basis) & (slots - 1)]


def trace_argument(topic: str, settings: TopicSettings) -> str:
    """The scripts' trace argument for ``topic``: ``""`` when its trace is off, else
    ``"<topic>:<retention ms>:<cap>"``."""
    if not settings.trace:
        return ""
    return f"{topic}:{to_ms(settings.trace_retention)}:{settings.trace_cap}"


_SCAN_COUNT = 1000  # fields a tally scan asks for per command
_MARKER = b"\0@"  # where a record starts (lua/includes/trace_record.lua)
_LONG = b"\0#"  # an entry that names a long member by its message id
_Entry = bytes  # a member as stored, or _LONG + its message id


def _elements(topic: str, slots: Sequence[int]) -> Op[dict[int, list[bytes]]]:
    """Each slot's trace list, whole (about `cap` elements: the scripts trim it to that; in
    pages, a trim between two would shift the second)."""
    lists = yield [command("LRANGE", SlotKeys(topic, slot).trace_events, 0, -1)
                   for slot in slots]
    return dict(zip(slots, lists, strict=True))


_Found = tuple[int, int, list[bytes], bytes | None]  # number, time, fields, its claim's seq


def _matching(elements: list[bytes], names_it: Callable[[_Entry], bool]
              ) -> tuple[list[_Found], int]:
    """The events of a slot's list that concern the message ``names_it`` recognizes, in the
    order recorded, each with its number among the list's events (from 1), the time of its
    record, its ten fields (a claim's line of a share, an ack's or extend's line of ids: one
    event per message, per delivery; a claimed message's merges: a "merged" event before its
    "claimed" one) and, for a delivery's events, the delivery's "d<seq>"; then how many
    events the list holds. Elements before the first record's start are left out: the
    cap's trimming cut them from their record. Only what concerns the message is built (a
    list holds about `cap` events)."""
    found: list[_Found] = []
    deliveries: set[bytes] = set()  # the message's, as "d<seq>"
    at = elements.index(_MARKER) if _MARKER in elements else len(elements)
    time, number = 0, 0
    while at < len(elements):
        if elements[at] == _MARKER:
            time, at = int(elements[at + 1]), at + 2
            continue
        fields = elements[at].split(b"\t", 9)
        at += 1
        subject = fields[2]
        if subject[:1] == b"=":
            n = int(subject[1:])
            entries, at = elements[at:at + n], at + n
            if fields[0] != b"claimed":
                for entry in entries:
                    number += 1
                    if names_it(entry):
                        found.append((number, time, fields, None))
                continue
            first = int(fields[3][1:])
            attempts = fields[4].split(b",") if fields[4] else None
            merges = fields[5].split(b",") if fields[5] else None
            for i, entry in enumerate(entries):
                merged = merges[i] if merges else b""
                number += 2 if merged else 1
                if not names_it(entry):
                    continue
                if merged:
                    found.append((number - 1, time, [
                        b"merged", fields[1], b"", b"", b"", merged[26:], merged[:13],
                        merged[13:26], b"", b""], None))
                seq = b"d%d" % (first + i)
                deliveries.add(seq)
                found.append((number, time, [fields[0], fields[1], b"", seq,
                                             attempts[i] if attempts else b"1", b"", b"", b"",
                                             *fields[8:]], seq))
        elif fields[0] in (b"acked", b"extended"):
            for seq in fields[3][1:].split(b","):
                number += 1
                if deliveries and b"d" + seq in deliveries:
                    found.append((number, time, [*fields[:3], b"d" + seq, *fields[4:]],
                                  b"d" + seq))
        else:
            number += 1
            if fields[3] in deliveries:
                found.append((number, time, fields, fields[3]))
    return found, number


def _event(fields: list[bytes], time: int, slot: int, message_id: str,
           claimed: tuple[int | None, str | None]) -> TraceEvent:
    """A recorded line as a TraceEvent; ``claimed``: the attempt and consumer of its
    delivery (a delivery's later events do not repeat them)."""
    event, group, _, delivery, attempt, count, first, last, consumer, error = fields
    return TraceEvent(
        event.decode(),  # type: ignore[arg-type]  # written by trace.lua: one of EVENTS
        int(first) if first else time, group.decode(), message_id, slot,
        f"{slot}-{int(delivery[1:])}" if delivery else None,
        consumer.decode("utf-8", "replace") if consumer else claimed[1],
        int(attempt) if attempt else claimed[0],
        error.decode("utf-8", "replace") or None,
        int(count) if count else 1, int(last) if last else None)


def read_trace(topic: str, message_id: str, member: bytes | None, slots: Sequence[int],
               groups: Sequence[str], retention_ms: int, cap: int) -> Op[list[TraceEvent]]:
    """The recorded events of ``message_id`` in ``slots`` younger than ``retention_ms`` by
    Redis's clock and among the last ``cap`` of their slot (the scripts trim by both now
    and then), oldest first, then the merges into its pending message not claimed yet, as
    one ``merged`` event per group. ``member``: the message as stored, when the caller knows
    it (a trace by body); else the records name it. The events of its deliveries are found
    through its ``claimed`` events, which name them (``lua/includes/trace.lua``)."""
    seconds, micros = (yield [command("TIME")])[0]
    since = int(seconds) * 1000 + int(micros) // 1000 - retention_ms
    lists = yield from _elements(topic, slots)
    wanted = _LONG + message_id.encode()
    prefix, digest = topic.encode() + b":", bytes.fromhex(message_id)
    ids: dict[_Entry, bool] = {}  # entry -> whether it names the message

    def names_it(entry: _Entry) -> bool:
        known = ids.get(entry)
        if known is None:
            known = ids[entry] = entry == wanted if entry[:2] == _LONG else (
                entry == member if member is not None
                else hashlib.sha1(prefix + entry).digest()[:8] == digest)
        return known

    found: list[tuple[tuple[int, int, float], TraceEvent]] = []
    entries: set[_Entry] = set()
    for slot, elements in lists.items():
        matches, total = _matching(elements, names_it)
        claims: dict[bytes | None, tuple[int | None, str | None]] = {}
        for number, time, fields, seq in matches:
            if number <= total - cap:
                continue
            event = _event(fields, time, slot, message_id, claims.get(seq, (None, None)))
            if event.event == "claimed":
                claims[seq] = (event.attempt, event.consumer)
            if (event.last_time or event.time) >= since:
                found.append(((event.time, slot, number), event))
    entries.update(entry for entry, named in ids.items() if named)
    if member is not None:
        entries.add(member if len(member) <= INLINE_MAX else wanted)
    elif not entries:  # its events trimmed, or none yet: its merges may still be counted
        entries.update((yield from _tally_entries(topic, slots, groups, names_it)))
    if entries:
        found += (yield from _open_merges(topic, message_id, sorted(entries), slots, groups,
                                          since))
    return _first_endings([event for _, event in sorted(found, key=lambda item: item[0])])


def _tally_entries(topic: str, slots: Sequence[int], groups: Sequence[str],
                   names_it: Callable[[_Entry], bool]) -> Op[set[_Entry]]:
    """The entries of the message in the groups' tallies (``HSCAN``, side by side): how a
    trace by id finds the merges into a message whose recorded events are gone."""
    tallies = [SlotKeys(topic, slot).group(group).trace_tally for slot in slots
               for group in groups]
    cursors: dict[str, Any] = dict.fromkeys(tallies, b"0")
    entries: set[_Entry] = set()
    while cursors:
        names = list(cursors)
        replies = yield [command("HSCAN", tally, cursors[tally], "COUNT", _SCAN_COUNT)
                         for tally in names]
        for tally, (cursor, pairs) in zip(names, replies, strict=True):
            for field in pairs:  # redis-py answers HSCAN with a dict
                # "\0~" and "\0s" are the tally's own (lua/includes/trace_save.lua)
                if (field[:1] != b"\0" or field[:2] == _LONG) and names_it(field):
                    entries.add(field)
            if int(cursor) == 0:
                del cursors[tally]
            else:
                cursors[tally] = cursor
    return entries


def _open_merges(topic: str, message_id: str, entries: Sequence[_Entry], slots: Sequence[int],
                 groups: Sequence[str], since: int
                 ) -> Op[list[tuple[tuple[int, int, float], TraceEvent]]]:
    """The merges into the message while pending that no claim has recorded yet (the
    tally's fields of its entry in each group), one ``merged`` event per group, placed after
    every recorded event of its millisecond."""
    asked = [(slot, group, entry) for slot in slots for group in groups for entry in entries]
    values = yield [command("HGET", SlotKeys(topic, slot).group(group).trace_tally, entry)
                    for slot, group, entry in asked]
    merges = []
    for (slot, group, _), value in zip(asked, values, strict=True):
        if value is not None and int(value[13:26]) >= since:  # first ms, last ms, count
            first = int(value[:13])
            merges.append(((first, slot, math.inf), TraceEvent(
                "merged", first, group, message_id, slot, count=int(value[26:]),
                last_time=int(value[13:26]))))
    return merges


_SETTLES = frozenset({"extended", "acked", "failed", "expired", "released"})
_ENDINGS = frozenset({"acked", "failed", "expired", "released"})


def _first_endings(events: list[TraceEvent]) -> list[TraceEvent]:
    """``events`` without what a delivery's first ending makes moot: an ack, extend, nack,
    release or expiry of a delivery that had ended already (an ack traces every id it
    names, the ones it finds settled too)."""
    ended: set[str | None] = set()
    kept = []
    for event in events:
        if event.event in _SETTLES:
            if event.delivery_id in ended:
                continue
            if event.event in _ENDINGS:
                ended.add(event.delivery_id)
        kept.append(event)
    return kept


def purge_call(topic: str, group: str, slot: int, trace: str, ids: Sequence[bytes]) -> Call:
    """The call that deletes the dead letters ``ids`` of ``group`` in ``slot``, each traced
    as purged (``lua/purge_dead.lua``); it answers how many there were."""
    k = SlotKeys(topic, slot)
    keys = [k.group(group).dead, k.group(group).dead_index, *k.trace(group)]
    return script_call(script("purge_dead"), keys, [trace, *ids])
