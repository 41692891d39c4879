"""A non-destructive read of everything a topic holds, for analytics (the Spark batch read).

Each (group, slot) is read in one pipelined round trip of plain reads, not a transaction:
a message that changes state while it is read may appear in two states or in none. Nothing
is modified.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

from ..message import PropertyValue, message_id_of
from .calls import Op, command
from .codec import (
    LeaseEnds,
    decode_parts,
    decode_stored,
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

__all__ = ["SnapshotRow", "State", "STATES", "snapshot_slot"]

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
    its ``due_at`` is when it would fall due were the transaction committed now."""

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
    rows: list[SnapshotRow] = []

    def message_id(member: bytes) -> str:
        return message_id_of(topic, merge_identity(member) if by_key else member)

    def pending(state: State, entries: list[Any], due: Any, prio: Any) -> None:
        for member, score in scored_pairs(entries):
            # (merging by key the member is the identity, its message's id; a value missing
            # there is shown as the identity itself, as a claim would hand it out)
            body, key, tag, properties = decode_parts(values.get(member, member))
            due_at = due(score) if state == "delayed" else min(due(score), now)
            rows.append(SnapshotRow(topic, group, slot, state, prio(score), due_at,
                                    int(attempts.get(member, 0)), key, body, tag=tag,
                                    properties=properties,
                                    message_id=message_id_of(topic, member)))

    pending("ready", ready, ready_due, ready_priority)
    pending("delayed", delayed, delayed_due, delayed_priority)
    lease_of = LeaseEnds(scored_pairs(leases))
    for delivery, raw in inflight.items():
        record = parse_inflight(raw)
        body, key, tag, properties = decode_parts(record.member)
        rows.append(SnapshotRow(topic, group, slot, "in_flight", record.priority, record.due_at,
                                record.attempts, key, body, f"{slot}-{int(delivery)}",
                                lease_of(int(delivery)), holder=record.holder, tag=tag,
                                properties=properties,
                                message_id=message_id(record.member)))
    for delivery, raw in dead.items():
        dead_record = parse_dead(raw)
        # a message no claim could decode (dead.dead_letter) shows whole, as its body
        body, key, tag, properties = decode_stored(dead_record.member)
        rows.append(SnapshotRow(topic, group, slot, "dead", dead_record.priority,
                                dead_record.due_at, dead_record.attempts, key, body,
                                f"{slot}-{int(delivery)}", dead_at=dead_record.dead_at,
                                error=dead_record.error, tag=tag, properties=properties,
                                message_id=message_id(dead_record.member)))
    return rows

