"""What a flow of :class:`~rmq.client.base.BaseClient` yields for its client to perform: a
round trip (``list[Call]``), a registry load, a wake-up subscription, a sleep on it, or a
wait for a limited group's capacity. The sync and async clients perform each their way."""

from __future__ import annotations

from collections.abc import Generator
from typing import Any, NamedTuple, TypeVar

from ..storage.calls import Call

__all__ = ["AwaitCapacity", "Effect", "Flow", "Load", "Subscribe", "Sleep"]

T = TypeVar("T")


class Load(NamedTuple):
    """Load the topic's registry entry (and cache it); ``fresh`` loads are never shared."""

    topic: str
    fresh: bool


class Subscribe(NamedTuple):
    """Open the topic's wake-up subscription if needed and forget wake-ups received so far."""

    topic: str


class Sleep(NamedTuple):
    """Sleep on the topic's wake-up subscription until woken or ``seconds`` pass."""

    topic: str
    seconds: float


class AwaitCapacity(NamedTuple):
    """Block on a limited group's wake list (BLPOP) until a token or ``seconds`` pass."""

    key: str
    seconds: float


Effect = list[Call] | Load | Subscribe | Sleep | AwaitCapacity
Flow = Generator[Effect, Any, T]
