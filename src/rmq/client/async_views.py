"""``rmq.AsyncClient``'s reading views: those of :class:`~rmq.client.sync_views.ViewMethods`,
awaited."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from ..settings import DEFAULT_GROUP
from ..storage.history import TopicHistory
from ..storage.peek import PeekPage
from ..storage.snapshot import SnapshotRow
from ..storage.stats import TopicStats
from ..storage.trace import TraceEvent
from .host import AsyncHost
from .views import ViewFlows

__all__ = ["AsyncViewMethods"]


class AsyncViewMethods(ViewFlows, AsyncHost):
    """``rmq.AsyncClient``'s reading views."""

    async def stats(self, topic: str) -> TopicStats:
        """See :meth:`rmq.Client.stats`."""
        return await self._run(self._stats(topic))

    async def snapshot(self, topic: str, *, groups: Sequence[str] | None = None,
                       slots: Sequence[int] | None = None) -> AsyncIterator[SnapshotRow]:
        """See :meth:`rmq.Client.snapshot`: ``async for row in client.snapshot(topic)``."""
        for group, slot in await self._run(self._snapshot_parts(topic, groups, slots)):
            for row in await self._run(self._snapshot_part(topic, group, slot)):
                yield row

    # -- history, peeks and finding messages (the console) --------------------------------

    async def record_history(self, topic: str) -> bool:
        """See :meth:`rmq.Client.record_history`."""
        return await self._run(self._record_history(topic))

    async def history(self, topic: str, minutes: float = 60.0) -> TopicHistory:
        """See :meth:`rmq.Client.history`."""
        return await self._run(self._history(topic, minutes))

    async def peek(self, topic: str, state: str, group: str = DEFAULT_GROUP, *,
                   slot: int | None = None, offset: int = 0, limit: int = 50) -> PeekPage:
        """See :meth:`rmq.Client.peek`."""
        return await self._run(self._peek(topic, state, group, slot, offset, limit))

    async def find_messages(self, topic: str, body: bytes | str | None = None, *,
                            key: bytes | str | None = None,
                            every_slot: bool = False) -> list[SnapshotRow]:
        """See :meth:`rmq.Client.find_messages`."""
        return await self._run(self._find_messages(topic, body, key, every_slot))

    async def trace(self, topic: str, message_id: str | None = None, *,
                    body: bytes | str | None = None,
                    key: bytes | str | None = None) -> list[TraceEvent]:
        """See :meth:`rmq.Client.trace`."""
        return await self._run(self._trace(topic, message_id, body, key))
