"""A non-destructive read of everything a topic holds, for analytics (the Spark batch read).

Each (group, slot) is read in one pipelined round trip of plain reads, not a transaction:
a message that changes state while it is read may appear in two states or in none. Nothing
is modified.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ..errors import CorruptMessage
from ..message import PropertyValue, message_id_of
from .calls import Op, command
from .codec import (
    DECODE_ERRORS,
    DeadRecord,
    LeaseEnds,
    decode_parts,
    delayed_due,
    delayed_priority,
    merge_identity,
    parse_dead,
    parse_inflight,
    ready_due,
    ready_priority,
    scored_pairs,
)
from .keys import SlotKeys

__all__ = ["SnapshotRow", "State", "STATES", "snapshot_slot", "stored_row"]

State = Literal["ready", "delayed", "in_flight", "dead", "half"]
STATES: tuple[State, ...] = ("ready", "delayed", "in_flight", "dead")


@dataclass(frozen=True, slots=True)
class SnapshotRow:
    """One stored message. ``attempts`` counts deliveries so far; ``id`` (``"slot-seq"``, as
    :attr:`Message.id`) is set for in-flight messages and dead letters (a dead letter's, as
    a client's ``snapshot``, ``peek`` or ``find_messages`` returns it, is
    :attr:`DeadLetter.id`, with the topic's generation); ``lease_until`` for in-flight
    ones, and ``holder``, the id of the consumer that claimed it (None when the claim did
    not say); ``error`` and ``dead_at`` for dead letters; ``tag`` and ``properties`` are
    what it was sent with; ``message_id`` names the message (:attr:`Message.message_id`)
    beside the delivery ``id``. Times are epoch milliseconds. A half message (state
    "half", of an open transaction: docs/transactions.md) belongs to no group yet
    (``group`` is "") and carries its transaction's id in ``id``;
    its ``due_at`` is when it would fall due were the transaction committed now.
    ``corrupt``: what is stored cannot be decoded (docs/semantics.md, "Consuming"): ``body``
    is the stored bytes, ``error`` a :class:`~rmq.errors.CorruptMessage`'s text (a dead
    letter's own error when it has one), and what could not be read is 0 or None."""

    topic: str
    group: str
    slot: int
    state: State
    priority: int
    due_at: int
    attempts: int
    key: bytes | None
    body: bytes
    id: str | None = None
    lease_until: int | None = None
    dead_at: int | None = None
    error: str | None = None
    holder: str | None = None
    tag: str | None = None
    properties: Mapping[str, PropertyValue] = field(default_factory=dict)
    message_id: str = ""
    corrupt: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def snapshot_slot(topic: str, group: str, slot: int, now: int,
                  by_key: bool = False) -> Op[list[SnapshotRow]]:
    """Every message of ``group`` in ``slot``. ``by_key``: the topic merges by key: a
    pending message is named by its identity and shows its newest value (docs/storage.md,
    "Merging by key"), and every message's id hashes its identity."""
    k = SlotKeys(topic, slot).group(group)
    ready, delayed, inflight, leases, dead, attempts, values = yield [
        command("ZRANGE", k.ready, 0, -1, "WITHSCORES"),
        command("ZRANGE", k.delayed, 0, -1, "WITHSCORES"),
        command("HGETALL", k.inflight),
        command("ZRANGE", k.leases, 0, -1, "WITHSCORES"),
        command("HGETALL", k.dead),
        command("HGETALL", k.attempts),
        command("HGETALL", k.values),
    ]
    rows: list[SnapshotRow | None] = []
    pending: tuple[tuple[State, Any], ...] = (("ready", ready), ("delayed", delayed))
    for state, entries in pending:
        rows += [stored_row(topic, group, slot, state, member, score, attempts.get(member),
                            now, by_key=by_key, stored=values.get(member))
                 for member, score in scored_pairs(entries)]
    lease_of = LeaseEnds(scored_pairs(leases))
    rows += [stored_row(topic, group, slot, "in_flight", delivery, 0.0, raw, now,
                        lease_of(int(delivery)) if delivery.isdigit() else None, by_key=by_key)
             for delivery, raw in inflight.items()]
    rows += [stored_row(topic, group, slot, "dead", delivery, 0.0, raw, now, by_key=by_key)
             for delivery, raw in dead.items()]
    return [row for row in rows if row is not None]


def _problem(what: str, stored: bytes, error: BaseException) -> str:
    return str(CorruptMessage(what, stored, f"{type(error).__name__}: {error}"))


def stored_row(topic: str, group: str, slot: int, state: State, name: bytes, score: float,
               value: bytes | None, now: int, lease: int | None = None, *,
               by_key: bool = False, stored: bytes | None = None) -> SnapshotRow | None:
    """The row of the message ``name`` (a pending member, or a delivery id) in ``state``;
    ``value`` its attempts, in-flight or dead record; ``stored``, merging by key (``by_key``),
    a pending identity's newest value; None for a delivery settled between two reads. What
    cannot be decoded makes a row marked ``corrupt`` (its ``error`` a CorruptMessage's text)
    with what could be read, its stored bytes as its body: never an exception."""
    if state in ("ready", "delayed"):
        member = name if stored is None else stored
        if state == "ready":
            due, priority = min(ready_due(score), now), ready_priority(score)
        else:
            due, priority = delayed_due(score), delayed_priority(score)
        # (merging by key ``name`` is the identity, its message's id)
        message_id = message_id_of(topic, name)
        try:
            attempts = int(value or 0)
            body, key, tag, properties = decode_parts(member)
        except DECODE_ERRORS as error:
            attempts, problem = _pending_problem(state, member, stored is not None, value, error)
            return SnapshotRow(topic, group, slot, state, priority, due, attempts, None, member,
                               error=problem, message_id=message_id, corrupt=True)
        return SnapshotRow(topic, group, slot, state, priority, due, attempts, key, body,
                           tag=tag, properties=properties, message_id=message_id)
    if value is None:  # settled between the two reads
        return None
    delivery = f"{slot}-{name.decode('ascii', 'replace')}"
    label = "in-flight" if state == "in_flight" else "dead"
    lease = lease if state == "in_flight" else None
    try:
        record = parse_inflight(value) if state == "in_flight" else parse_dead(value)
    except DECODE_ERRORS as error:
        return SnapshotRow(topic, group, slot, state, 0, 0, 0, None, value, delivery, lease,
                           error=_problem(f"{label} record", value, error), corrupt=True)
    message_id = message_id_of(topic, merge_identity(record.member) if by_key
                               else record.member)
    dead_at, error_text, holder = ((record.dead_at, record.error, None)
                                   if isinstance(record, DeadRecord)
                                   else (None, None, record.holder))
    try:
        body, key, tag, properties = decode_parts(record.member)
    except DECODE_ERRORS as error:
        # a dead letter keeps its error (a message no claim could decode, dead.dead_letter,
        # has the claim's); shown whole, as its body
        return SnapshotRow(topic, group, slot, state, record.priority, record.due_at,
                           record.attempts, None, record.member, delivery, lease, dead_at,
                           error_text or _problem(f"{label} message", record.member, error),
                           holder, message_id=message_id, corrupt=True)
    return SnapshotRow(topic, group, slot, state, record.priority, record.due_at,
                       record.attempts, key, body, delivery, lease, dead_at, error_text,
                       holder, tag, properties, message_id)


def _pending_problem(state: State, member: bytes, merged: bool, attempts: bytes | None,
                     error: BaseException) -> tuple[int, str]:
    """The attempts (0 when they are what is damaged) and the error of a pending message's
    row that cannot be decoded."""
    try:
        count = int(attempts or 0)
    except ValueError:
        return 0, _problem("attempts count", attempts or b"", error)
    return count, _problem("pending value" if merged else f"{state} message", member, error)
