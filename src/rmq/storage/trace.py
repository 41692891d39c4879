"""The trace of a topic's messages (docs/trace.md): what the scripts record while the topic's
``trace`` setting is on (``lua/includes/trace.lua``), and reading it back.

A script learns from one argument whether to trace: ``trace_argument`` gives ``""`` for a
topic without the trace (the scripts then do nothing more), else the topic's name, retention
and cap; the slot's trace log (``SlotKeys.trace_log``) then follows the keys it already
takes. Each script call appends its events to the slot's list as one record, a line each,
the messages a line names after it as they are stored (docs/storage.md, "The trace"). A
send merged into a ready message is named by the message's ready score, which its claim
(or a change of its score) records beside it. A delivery's later events name its delivery
seq only: ``read_trace`` finds them through the ``claimed`` events of the message, and finds
the message by hashing what the records hold into message ids.
"""

from __future__ import annotations

import hashlib
import math
import re
import zlib
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from itertools import accumulate
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
                    "expired", "released", "dead", "requeued", "purged", "superseded",
                    "cancelled", "outdated"]
EVENTS: tuple[EventName, ...] = ("sent", "merged", "promoted", "claimed", "extended", "acked",
                                 "failed", "expired", "released", "dead", "requeued", "purged",
                                 "superseded", "cancelled", "outdated")
_MESSAGE_ID = re.compile(r"[0-9a-f]{16}")


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
                 key: bytes | None, by_key: bool = False) -> tuple[str, bytes | None, list[int]]:
    """Which message a trace asks for (its id, and the member when the query gives it), and
    the slots to read: a ``message_id`` may be in any slot (a send's ``slot_basis`` decides,
    which the id does not hold); a ``body`` (and ``key``: without it, a message sent
    without one) is the message a send of them makes, in the slot such a send goes to.
    On a topic merging by key (``by_key``) the message is its key's, whatever its body (a
    ``key`` alone names it; a ``body`` alone names the message sent with no key).
    InvalidQuery when it names none or two."""
    if message_id is not None:
        if body is not None or key is not None:
            raise InvalidQuery("give a message_id or a body (and key), not both")
        if not is_message_id(message_id):
            raise InvalidQuery(f"not a message id (16 hex digits): {message_id!r}")
        return message_id, None, list(range(slots))
    if by_key and key is not None:
        return message_id_of(topic, key), key, [zlib.crc32(key) & (slots - 1)]
    if body is None:
        raise InvalidQuery("give a message_id, or the body (and key) of the message to trace")
    if by_key:
        return message_id_of(topic, body), body, [zlib.crc32(body) & (slots - 1)]
    basis = body if key is None else key
    member = encode_member(body, key)
    return message_id_of(topic, member), member, [zlib.crc32(basis) & (slots - 1)]


def trace_argument(topic: str, settings: TopicSettings) -> str:
    """The scripts' trace argument for ``topic``: ``""`` when its trace is off, else
    ``"<topic>:<retention ms>:<cap>"``."""
    if not settings.trace:
        return ""
    return f"{topic}:{to_ms(settings.trace_retention)}:{settings.trace_cap}"


_MARKER = b"\0@"  # where a record starts (lua/includes/trace_record.lua)
_LONG = b"\0#"  # an entry that names a long member by its message id
_Entry = bytes  # a member as stored, or _LONG + its message id
_PENDING = math.inf  # the time up to which the score a message holds now names it


_Asked = list[tuple[int, str, bytes]]  # (slot, group, member) whose ready score to read


def _log_reads(topic: str, slots: Sequence[int]) -> list[Call]:
    """Each slot's trace log, whole (about `cap` elements: the scripts trim it to that; in
    pages, a trim between two would shift the second)."""
    return [command("LRANGE", SlotKeys(topic, slot).trace_log, 0, -1) for slot in slots]


def _score_reads(topic: str, asked: _Asked) -> list[Call]:
    """The ready score each message holds now in a group of a slot: it names the merges
    recorded since its last claim."""
    return [command("ZSCORE", SlotKeys(topic, slot).group(group).ready, member)
            for slot, group, member in asked]


def _score(text: bytes) -> int:
    """A ready score as a line holds it: written by Lua as an integer, or as Redis printed
    it (a double: an exponent is possible)."""
    try:
        return int(text)
    except ValueError:
        return int(float(text))


@dataclass
class _SlotTrace:
    """What a slot's log says about one message: ``events``, its events named by its entry
    (number among the list's events from 1, record time, the line's fields, and for a
    delivery's events the delivery's "d<seq>"); ``merges``, the merges into it named by its
    entry (number, time, group, count); ``scores``, per group the ready scores it held and
    the latest time a line says so; ``refs``, every line of merges named by score (number
    before its first, time, group, the scores); ``total``, the events the list holds."""

    events: list[tuple[int, int, list[bytes], bytes | None]] = field(default_factory=list)
    merges: list[tuple[int, int, bytes, int]] = field(default_factory=list)
    scores: dict[bytes, dict[int, float]] = field(default_factory=dict)
    refs: list[tuple[int, int, bytes, bytes]] = field(default_factory=list)
    total: int = 0

    def held(self, group: bytes, score: int, time: float) -> None:
        known = self.scores.setdefault(group, {})
        known[score] = max(time, known.get(score, time))

    def names_it(self) -> bool:
        """Whether the list names the message at all."""
        return bool(self.events or self.merges or self.scores)

    def merges_by_score(self) -> list[tuple[int, int, bytes, int]]:
        """The merges named by a score the message held when they were recorded."""
        merges = []
        for number, time, group, scores in self.refs:
            held = self.scores.get(group)
            if not held:
                continue
            for j, text in enumerate(scores.split(b",")):
                until = held.get(_score(text))
                if until is not None and time <= until:
                    merges.append((number + j + 1, time, group, 1))
        return merges


def _matching(elements: list[bytes], names_it: Callable[[_Entry], bool]) -> _SlotTrace:
    """What a slot's list says about the message ``names_it`` recognizes (a claim's line of
    a share, an ack's or extend's line of ids: one event per message, per delivery).
    Elements before the first record's start are left out: the cap's trimming cut them from
    their record. Only what concerns the message is built (a list holds about `cap`
    events)."""
    found = _SlotTrace()
    deliveries: set[bytes] = set()  # the message's, as "d<seq>"
    at = elements.index(_MARKER) if _MARKER in elements else len(elements)
    time, number = 0, 0
    while at < len(elements):
        if elements[at] == _MARKER:
            time, at = int(elements[at + 1]), at + 2
            continue
        fields = elements[at].split(b"\t", 8)
        at += 1
        event, group, subject = fields[0], fields[1], fields[2]
        if subject[:1] == b"~":
            found.refs.append((number, time, group, fields[6]))
            number += int(subject[1:])
        elif subject[:1] == b"=":
            n = int(subject[1:])
            entries, at = elements[at:at + n], at + n
            if event == b"claimed":
                first = int(fields[3][1:])
                attempts = fields[4].split(b",") if fields[4] else None
                scores: list[int] = []  # the first, then differences: read when needed
                for i, entry in enumerate(entries):
                    number += 1
                    if not names_it(entry):
                        continue
                    seq = b"d%d" % (first + i)
                    deliveries.add(seq)
                    scores = scores or list(accumulate(map(int, fields[6].split(b","))))
                    found.held(group, scores[i], time)
                    found.events.append((number, time, [
                        event, group, b"", seq, attempts[i] if attempts else b"1", b"", b"",
                        *fields[7:]], seq))
            elif event == b"merged":
                counts = fields[5].split(b",") if fields[5] else None
                for i, entry in enumerate(entries):
                    number += 1
                    if names_it(entry):
                        found.merges.append((number, time, group,
                                             int(counts[i]) if counts else 1))
            elif event == b"rescored":
                number += 1
                if names_it(entries[0]):
                    found.held(group, _score(fields[6]), time)
            else:
                for entry in entries:
                    number += 1
                    if names_it(entry):
                        found.events.append((number, time, fields, None))
        elif event in (b"acked", b"extended"):
            for seq in fields[3][1:].split(b","):
                number += 1
                if deliveries and b"d" + seq in deliveries:
                    found.events.append((number, time, [*fields[:3], b"d" + seq, *fields[4:]],
                                         b"d" + seq))
        else:
            number += 1
            if fields[3] in deliveries:
                found.events.append((number, time, fields, fields[3]))
    found.total = number
    return found


def _event(fields: list[bytes], time: int, slot: int, message_id: str,
           claimed: tuple[int | None, str | None]) -> TraceEvent:
    """A recorded line as a TraceEvent; ``claimed``: the attempt and consumer of its
    delivery (a delivery's later events do not repeat them)."""
    event, group, _, delivery, attempt, _, _, consumer, error = fields
    return TraceEvent(
        event.decode(),  # type: ignore[arg-type]  # written by trace.lua: one of EVENTS
        time, group.decode(), message_id, slot,
        f"{slot}-{int(delivery[1:])}" if delivery else None,
        consumer.decode("utf-8", "replace") if consumer else claimed[1],
        int(attempt) if attempt else claimed[0],
        error.decode("utf-8", "replace") or None)


_Sorted = tuple[tuple[int, int, float], TraceEvent]  # (time, slot, number), the event


def _merged_runs(trace: _SlotTrace, merges: list[tuple[int, int, bytes, int]], slot: int,
                 message_id: str) -> list[_Sorted]:
    """The message's merges in a group between two of its other events there, each run as
    one ``merged`` event: the count, the first's time and the last's."""
    marks = sorted([(number, group, time, count) for number, time, group, count in merges]
                   + [(number, fields[1], -1, 0) for number, _, fields, _ in trace.events])
    runs: dict[bytes, list[int]] = {}  # group -> [first number, first time, last time, count]
    events: list[_Sorted] = []

    def close(group: bytes) -> None:
        run = runs.pop(group, None)
        if run:
            events.append(((run[1], slot, run[0]), TraceEvent(
                "merged", run[1], group.decode(), message_id, slot, count=run[3],
                last_time=run[2])))

    for number, group, time, count in marks:
        if time < 0:  # another event of the message in the group: the run ends
            close(group)
        elif group in runs:
            run = runs[group]
            run[2], run[3] = time, run[3] + count
        else:
            runs[group] = [number, time, time, count]
    for group in list(runs):
        close(group)
    return events


def read_trace(topic: str, message_id: str, member: bytes | None, slots: Sequence[int],
               groups: Sequence[str], retention_ms: int, cap: int) -> Op[list[TraceEvent]]:
    """The recorded events of ``message_id`` in ``slots`` younger than ``retention_ms`` by
    Redis's clock and among the last ``cap`` of their slot (the scripts trim by both now
    and then), oldest first, the merges into it while pending counted as one ``merged``
    event a run. ``member``: the message as stored, when the caller knows it (a trace by
    body); else the records name it. The events of its deliveries are found through its
    ``claimed`` events, which name them; the merges named by a ready score through the
    events that name it with that score, and through the score it holds now when it is
    pending (``lua/includes/trace.lua``)."""
    # one round trip, and for a trace by body its scores now too: the member is known
    asked: _Asked = [] if member is None else [
        (slot, group, member) for slot in slots for group in groups]
    (seconds, micros), *replies = yield [command("TIME"), *_log_reads(topic, slots),
                                         *_score_reads(topic, asked)]
    since = int(seconds) * 1000 + int(micros) // 1000 - retention_ms
    lists, scores = replies[:len(slots)], replies[len(slots):]
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

    traces = {slot: _matching(elements, names_it)
              for slot, elements in zip(slots, lists, strict=True)}
    if member is None:  # by id: the message as its events name it, in the slots they are in
        members = sorted(entry for entry, named in ids.items()
                         if named and entry[:2] != _LONG)
        asked = [(slot, group, entry) for slot, trace in traces.items() if trace.names_it()
                 for group in groups for entry in members]
        scores = (yield _score_reads(topic, asked)) if asked else []
    for (slot, group, _), score in zip(asked, scores, strict=True):
        if score is not None:
            traces[slot].held(group.encode(),
                              _score(score) if isinstance(score, bytes) else int(score), _PENDING)
    found: list[_Sorted] = []
    for slot, trace in traces.items():
        claims: dict[bytes | None, tuple[int | None, str | None]] = {}
        for number, time, fields, seq in trace.events:
            if number <= trace.total - cap:
                continue
            event = _event(fields, time, slot, message_id, claims.get(seq, (None, None)))
            if event.event == "claimed":
                claims[seq] = (event.attempt, event.consumer)
            if event.time >= since:
                found.append(((event.time, slot, number), event))
        merges = [merge for merge in trace.merges + trace.merges_by_score()
                  if merge[0] > trace.total - cap and merge[1] >= since]
        found += _merged_runs(trace, merges, slot, message_id)
    return _first_endings([event for _, event in sorted(found, key=lambda item: item[0])])


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
    keys = [k.group(group).dead, k.group(group).dead_index, k.trace_log]
    return script_call(script("purge_dead"), keys, [trace, *ids])
