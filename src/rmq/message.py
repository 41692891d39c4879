"""What producers get back and what consumers are handed."""

from __future__ import annotations

import json as _json
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

__all__ = ["Priority", "Message", "DeadLetter", "SendResult", "SendCounts"]


class Priority(IntEnum):
    """Named priority levels; any integer 0-255 is valid, higher is served first."""

    LOW = 64
    MEDIUM = 128
    HIGH = 192


@dataclass(frozen=True, slots=True)
class SendResult:
    """Where a send went: its slot, and whether it merged into a pending message in every
    bound group (so nothing new was stored)."""

    slot: int
    merged: bool


@dataclass(frozen=True, slots=True)
class SendCounts:
    """Outcome of ``send_many``: messages sent, and how many of them merged everywhere."""

    sent: int
    merged: int


@dataclass(frozen=True, slots=True)
class Message:
    """One delivery of a message to a consumer of a group.

    ``id`` names this delivery (its lease); ``attempts`` counts deliveries so far, 1 on the
    first. ``key`` is the message's key (None when it has none; serial topics then use the
    body). ``due_at`` is when it became due, in epoch milliseconds.
    """

    topic: str
    group: str
    slot: int
    id: int
    body: bytes
    priority: int
    attempts: int
    due_at: int
    key: bytes | None = None
    leased_until: float = field(default=0.0, compare=False)

    @property
    def text(self) -> str:
        """The body decoded as UTF-8."""
        return self.body.decode("utf-8")

    def json(self) -> Any:
        """The body parsed as JSON."""
        return _json.loads(self.body)

    @property
    def delivery_id(self) -> str:
        """The id as ``slot-id``, unique within the topic's group."""
        return f"{self.slot}-{self.id}"


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message whose retries are spent. ``id`` is ``slot-delivery`` and is what
    ``requeue_dead`` takes; ``error`` is the last failure; times are epoch milliseconds."""

    id: str
    topic: str
    group: str
    body: bytes
    key: bytes | None
    priority: int
    attempts: int
    error: str
    due_at: int
    dead_at: int

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")
