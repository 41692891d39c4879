"""What the client's features need from the client, said once (as redis-py's command mixins
type ``self`` against its ``CommandsProtocol``).

A feature of the client is a mixin of flows (``registry_flows.py``, ``views.py``,
``transactions.py``) and, for each client, of the public methods that run them
(``sync_views.py``, ``async_views.py``, ``tx_handles.py``). Each mixin subclasses the
protocol of the class it is mixed into, so every method's ``self`` is typed by what that
class provides: :class:`ClientHost` is :class:`~rmq.client.base.BaseClient`'s registry cache,
clock and retry on a re-created topic; :class:`SyncHost` and :class:`AsyncHost` add how
``Client`` and ``AsyncClient`` run a flow. The fleet limits' hooks
(:class:`~rmq.client.limited.FleetLimits`) use the same ``ClientHost``.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, Protocol, TypeVar

from ..runtime.checker import CheckBack
from ..storage.calls import Op
from ..storage.registry import TopicInfo
from .effects import Flow

__all__ = ["ClientHost", "SyncHost", "AsyncHost", "Runner", "AsyncRunner"]

T = TypeVar("T")


class ClientHost(Protocol):
    """What every feature's flows use of :class:`~rmq.client.base.BaseClient`."""

    is_cluster: bool  # known once connected: a single node's scripts do more in one call

    def now(self) -> int:
        """The time by which due times and leases are judged, in epoch ms."""
        ...

    def _now(self) -> Flow[int]:
        """``now()`` for a flow: measures the server's clock first when that is due."""
        ...

    def _cached(self, name: str) -> TopicInfo | None:
        """The topic's registry entry if this client holds a copy not yet stale."""
        ...

    def _drop_cached(self, name: str) -> None:
        """Forget the topic's cached entry: the next use reads it afresh."""
        ...

    def _topic(self, name: str, fresh: bool = False) -> Flow[TopicInfo]:
        """The topic's registry entry, cached or loaded (``fresh``: loaded)."""
        ...

    def _on_current(self, name: str, act: Callable[[TopicInfo, bool], Flow[T]]) -> Flow[T]:
        """``act(info, first)`` on the topic's entry, again on a fresh one if the scripts
        found the topic deleted or re-created since the entry was read."""
        ...

    def _changing(self, name: str, op: Op[T]) -> Flow[T]:
        """A registry change: the cached entry is dropped after it, whatever happens."""
        ...

    def _heads(self, info: TopicInfo) -> bool:
        """Whether the topic keeps a heads index here."""
        ...


class SyncHost(ClientHost, Protocol):
    """What the methods' mixins of ``rmq.Client`` use of it besides :class:`ClientHost`."""

    _check_backs: list[CheckBack]  # the @checker functions' check-backs, run by run()

    def _run(self, flow: Flow[T]) -> T:
        """Run ``flow`` to its value, performing each effect it yields."""
        ...

    def topic(self, name: str, *, fresh: bool = False) -> TopicInfo:
        """The topic's registry entry (what a check-back reads its timing from)."""
        ...


class AsyncHost(ClientHost, Protocol):
    """What the methods' mixins of ``rmq.AsyncClient`` use of it besides
    :class:`ClientHost`."""

    # (topic, fn) of @checker: the check-backs its run() starts on a threaded client
    _checkers: list[tuple[str, Callable[[str], Any]]]

    async def _run(self, flow: Flow[T]) -> T:
        """Run ``flow`` to its value, awaiting each effect it yields."""
        ...


class Runner(Protocol):
    """What drives a flow to its value for a handle of ``rmq.Client`` (its ``_run``)."""

    def __call__(self, flow: Flow[T], /) -> T: ...


class AsyncRunner(Protocol):
    """What drives a flow to its value for a handle of ``rmq.AsyncClient`` (its ``_run``)."""

    def __call__(self, flow: Flow[T], /) -> Awaitable[T]: ...
