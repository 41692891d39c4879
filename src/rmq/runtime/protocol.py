"""What the worker runtime needs from a client.

The runtime sits below the client layer: it drives any object with these methods (in
practice :class:`rmq.Client`), so ``Client.run()`` can start consumers without the two
layers importing each other.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from ..message import Claimed, Message
from ..storage.ready_look import ReadyLook
from ..storage.registry import ConsumerState, TopicInfo

__all__ = ["QueueClient", "WakeUps", "ReadyWatching"]


class WakeUps(Protocol):
    """A subscription to a topic's wake-up channel."""

    def wait(self, timeout: float) -> bool: ...

    def drain(self) -> None: ...


class ReadyWatching(Protocol):
    """What a batch consumer watches while its batch fills (``Client.ready_watch``)."""

    def look(self, count: int, urgent: int = ...) -> ReadyLook: ...

    def wait(self, timeout: float) -> bool: ...

    def lead(self, holder: str, lease: float) -> bool: ...

    def hand_on(self) -> None: ...

    def interrupt(self) -> None: ...

    def close(self) -> None: ...


class QueueClient(Protocol):
    """The client methods a consumer calls (see :class:`rmq.Client` for each promise)."""

    clock: Callable[[], int]  # what now() reads: the server's time, epoch ms
    url: str  # the Redis it talks to (what OpenTelemetry spans name as the server)

    def now(self) -> int: ...

    def topic(self, name: str, *, fresh: bool = False) -> TopicInfo: ...

    def bind(self, topic: str, group: str, *, tags: str | None = ..., where: str | None = ...,
             keep_filters: bool = ...) -> bool: ...

    def claim_due(self, topic: str, group: str = ..., count: int = ..., *,
                  lease: float | None = ..., ack: Message | Sequence[Message] = ...,
                  holder: str | None = ...) -> Claimed: ...

    def waiter(self, topic: str) -> WakeUps: ...

    def ready_watch(self, topic: str, group: str = ...) -> ReadyWatching: ...

    def wait_for_capacity(self, topic: str, group: str = ..., timeout: float = ...) -> bool: ...

    def ack(self, messages: Message | Sequence[Message]) -> int: ...

    def nack(self, message: Message, error: str | BaseException = ...) -> str | None: ...

    def release(self, messages: Sequence[Message]) -> int: ...

    def extend(self, messages: Message | Sequence[Message], seconds: float) -> list[bool]: ...

    def recover(self, topic: str | None = None) -> int: ...

    def heartbeat(self, state: ConsumerState) -> None: ...

    def forget_consumer(self, topic: str, consumer_id: str) -> None: ...

    def wake(self, topic: str) -> None: ...

    def record_history(self, topic: str) -> bool: ...
