"""The trace of a topic's messages (docs/trace.md): what the scripts record while the topic's
``trace`` setting is on (``lua/includes/trace.lua``), and reading it back.

A script learns from one argument whether to trace: ``trace_argument`` gives ``""`` for a
topic without the trace (the scripts then do nothing more), else the topic's name, retention
and cap; the slot's two trace keys (``SlotKeys.trace``) then follow the keys it already
takes. Each script call writes its events as one record of the slot's ``trace`` zset, a
line each (docs/storage.md, "The trace"); the merges into a pending message are counted in
the slot's ``trace:tally`` hash and become one ``merged`` line when the message is next
sent anew. A delivery's later events name its delivery seq only: ``read_trace`` finds them
through the ``claimed`` events of the message.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Sequence
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
_SCAN_COUNT = 1000


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
                 key: bytes | None) -> tuple[str, list[int]]:
    """Which message a trace asks for, and the slots to read: a ``message_id`` may be in
    any slot (a send's ``slot_basis`` decides, which the id does not hold); a ``body`` (and
    ``key``: without it, a message sent without one) is the message a send of them makes,
    in the slot such a send goes to. InvalidQuery when it names none or two."""
    if message_id is not None:
        if body is not None or key is not None:
            raise InvalidQuery("give a message_id or a body (and key), not both")
        if not is_message_id(message_id):
            raise InvalidQuery(f"not a message id (16 hex digits): {message_id!r}")
        return message_id, list(range(slots))
    if body is None:
        raise InvalidQuery("give a message_id, or the body (and key) of the message to trace")
    basis = body if key is None else key
    return (message_id_of(topic, encode_member(body, key)),
            [zlib.crc32(basis) & (slots - 1)])


def trace_argument(topic: str, settings: TopicSettings) -> str:
    """The scripts' trace argument for ``topic``: ``""`` when its trace is off, else
    ``"<topic>:<retention ms>:<cap>"``."""
    if not settings.trace:
        return ""
    return f"{topic}:{to_ms(settings.trace_retention)}:{settings.trace_cap}"


# A message's deliveries up to this many are looked up one pattern each; more, and the slot's
# records are read whole (each pattern costs a pass over the slot's records).
_PATTERNS_MAX = 16
_Place = tuple[int, int, int]  # slot, the record's event count, the line's index in it


def _scan(topic: str, patterns: dict[Any, tuple[int, str | None]]) -> Op[dict[Any, list[bytes]]]:
    """Every record of each ``(slot, pattern)`` (``ZSCAN ... MATCH``; None: all of the
    slot's), side by side until each scan ends."""
    cursors: dict[Any, Any] = dict.fromkeys(patterns, b"0")
    found: dict[Any, list[bytes]] = {name: [] for name in patterns}
    while cursors:
        names = list(cursors)
        replies = yield [command("ZSCAN", SlotKeys(topic, patterns[n][0]).trace_events,
                                 cursors[n], *(("MATCH", patterns[n][1]) if patterns[n][1]
                                               else ()), "COUNT", _SCAN_COUNT)
                         for n in names]
        for name, (cursor, pairs) in zip(names, replies, strict=True):
            found[name] += [member for member, _ in pairs]
            if int(cursor) == 0:
                del cursors[name]
            else:
                cursors[name] = cursor
    return found


def _lines(slot: int, record: bytes) -> list[tuple[_Place, int, list[bytes]]]:
    """A record's events: where each is (its place: the slot, then the event's number in
    the slot's count), the record's time, and its ten fields (a claim's line of a share, an
    ack's or extend's line of ids: one event per message, per delivery)."""
    head, *lines = record.split(b"\n")
    count, time = head.split(b"\t")
    events: list[list[bytes]] = []
    for line in lines:
        fields = line.split(b"\t", 9)
        if fields[0] == b"claimed":
            first = int(fields[3][1:])
            for i, (mid, attempt) in enumerate(zip(fields[2].split(b","),
                                                   fields[4].split(b","), strict=True)):
                events.append([fields[0], fields[1], mid, b"d%d" % (first + i), attempt,
                               *fields[5:]])
        elif fields[0] in (b"acked", b"extended"):
            events += [[*fields[:3], b"d" + seq, *fields[4:]]
                       for seq in fields[3][1:].split(b",")]
        else:
            events.append(fields)
    number = int(count) - len(events) + 1
    return [((slot, number + index, index), int(time), fields)
            for index, fields in enumerate(events)]


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


def read_trace(topic: str, message_id: str, slots: Sequence[int], groups: Sequence[str],
               retention_ms: int, cap: int) -> Op[list[TraceEvent]]:
    """The recorded events of ``message_id`` in ``slots`` younger than ``retention_ms`` by
    Redis's clock and among the last ``cap`` of their slot (the scripts trim by both now
    and then), oldest first (the order its slot recorded them), then the merges into its
    pending message not claimed yet, as one ``merged`` event per group. The events of its
    deliveries are found through its ``claimed`` events, which name them
    (``lua/includes/trace.lua``)."""
    mid = message_id.encode()
    *tallies, (seconds, micros) = yield [
        *(command("HMGET", SlotKeys(topic, slot).trace_tally, "#",
                  *(f"{message_id}|{group}" for group in groups)) for slot in slots),
        command("TIME")]
    since = int(seconds) * 1000 + int(micros) // 1000 - retention_ms
    oldest = {slot: int(values[0] or 0) - cap for slot, values in zip(slots, tallies,
                                                                       strict=True)}
    by_mid = yield from _scan(topic, {slot: (slot, f"*[\t,]{message_id}[\t,]*")
                                      for slot in slots})
    found: dict[_Place, tuple[int, TraceEvent]] = {}
    deliveries: dict[int, dict[bytes, tuple[int | None, str | None]]] = {}
    for slot, records in by_mid.items():
        for record in records:
            for place, time, fields in _lines(slot, record):
                if fields[2] != mid:
                    continue
                event = _event(fields, time, slot, message_id, (None, None))
                found[place] = (event.time, event)
                if event.event == "claimed":
                    deliveries.setdefault(slot, {})[fields[3]] = (event.attempt,
                                                                  event.consumer)
    scans: dict[Any, tuple[int, str | None]] = {}
    for slot, held in deliveries.items():
        if len(held) > _PATTERNS_MAX:
            scans[slot] = (slot, None)
        else:
            scans.update({(slot, d): (slot, f"*[d,]{d[1:].decode()}[,\t]*") for d in held})
    for name, records in (yield from _scan(topic, scans)).items():
        slot = scans[name][0]
        for record in records:
            for place, time, fields in _lines(slot, record):
                if not fields[2] and fields[3] in deliveries[slot] and place not in found:
                    found[place] = (time, _event(fields, time, slot, message_id,
                                                 deliveries[slot][fields[3]]))
    for slot, values in zip(slots, tallies, strict=True):
        for group, value in zip(groups, values[1:], strict=True):
            if value is not None:  # merges not closed yet: first ms, last ms, count
                first = int(value[:13])
                found[(slot, oldest[slot] + cap + 1, 0)] = (first, TraceEvent(
                    "merged", first, group, message_id, slot, count=int(value[26:]),
                    last_time=int(value[13:26])))
    ordered = sorted(found.items(), key=lambda item: (item[1][0], _merges_after_sent(
        item[0], item[1][1], found)))
    return _first_endings([event for (slot, number, _), (time, event) in ordered
                           if (event.last_time or time) >= since and number > oldest[slot]])


def _merges_after_sent(place: _Place, event: TraceEvent,
                       found: dict[_Place, tuple[int, TraceEvent]]) -> tuple[float, ...]:
    """Where an event sorts among those of its millisecond: a "merged" one (written when
    the message is next sent anew, or not yet) right after the "sent" its merges follow."""
    if event.event != "merged":
        return tuple(place)
    slot, number, _ = place
    sent = [n for (s, n, _), (_, e) in found.items()
            if s == slot and e.event == "sent" and e.group == event.group and n < number]
    return (slot, max(sent, default=0) + 0.5, 0)


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
    keys = [k.group(group).dead, k.group(group).dead_index, *k.trace()]
    return script_call(script("purge_dead"), keys, [trace, *ids])
