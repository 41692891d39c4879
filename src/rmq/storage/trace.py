"""The trace of a topic's messages (docs/trace.md): what the scripts record while the topic's
``trace`` setting is on (``lua/includes/trace.lua``), and reading it back.

A script learns from one argument whether to trace: ``trace_argument`` gives ``""`` for a
topic without the trace (the scripts then do nothing more), else the topic's name, retention
and cap; the slot's two trace keys (``SlotKeys.trace``) then follow the keys it already
takes. Each event is one member of the slot's ``trace`` zset, scored by its time
(docs/storage.md, "The trace"); the merges into a pending message are counted in the slot's
``trace:tally`` hash and become one ``merged`` event when the message is claimed.
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
_PENDING = float("inf")  # the order of merges not yet claimed: after every recorded event


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


def _event(slot: int, member: bytes) -> tuple[float, TraceEvent]:
    """A recorded event (its order in the slot, and itself) from its zset member."""
    (mid, order, time, event, group, seq, attempt, count, last, size,
     rest) = member.split(b"|", 10)
    n = int(size)
    name = event.decode()
    return int(order), TraceEvent(
        name,  # type: ignore[arg-type]  # written by trace.lua: one of EVENTS
        int(time), group.decode(), mid.decode(), slot,
        f"{slot}-{int(seq)}" if seq else None,
        rest[:n].decode("utf-8", "replace") or None,
        int(attempt) if attempt else None,
        rest[n:].decode("utf-8", "replace") or None,
        int(count) if count else 1,
        int(last) if last else None)


def read_trace(topic: str, message_id: str, slots: Sequence[int],
               groups: Sequence[str]) -> Op[list[TraceEvent]]:
    """The recorded events of ``message_id`` in ``slots``, oldest first (by time, then by
    the order the slot recorded them), with the merges into its pending message not
    claimed yet as one ``merged`` event per group."""
    pattern = f"{message_id}|*"
    cursors = {slot: b"0" for slot in slots}
    found: list[tuple[int, float, int, TraceEvent]] = []
    tallies = yield [command("HMGET", SlotKeys(topic, slot).trace_tally,
                             *(f"{message_id}|{group}" for group in groups)) for slot in slots]
    for slot, values in zip(slots, tallies, strict=True):
        for group, value in zip(groups, values, strict=True):
            if value is not None:
                count, first, last = (int(part) for part in value.split(b":"))
                found.append((first, _PENDING, slot, TraceEvent(
                    "merged", first, group, message_id, slot, count=count, last_time=last)))
    while cursors:
        names = list(cursors)
        replies = yield [command("ZSCAN", SlotKeys(topic, slot).trace_events, cursors[slot],
                                 "MATCH", pattern, "COUNT", _SCAN_COUNT) for slot in names]
        for slot, (cursor, pairs) in zip(names, replies, strict=True):
            for member, _ in pairs:
                order, event = _event(slot, member)
                found.append((event.time, order, slot, event))
            if int(cursor) == 0:
                del cursors[slot]
            else:
                cursors[slot] = cursor
    found.sort(key=lambda entry: entry[:3])
    return [event for *_, event in found]


def purge_call(topic: str, group: str, slot: int, trace: str, ids: Sequence[bytes]) -> Call:
    """The call that deletes the dead letters ``ids`` of ``group`` in ``slot``, each traced
    as purged (``lua/purge_dead.lua``); it answers how many there were."""
    k = SlotKeys(topic, slot)
    keys = [k.group(group).dead, k.group(group).dead_index, *k.trace()]
    return script_call(script("purge_dead"), keys, [trace, *ids])
