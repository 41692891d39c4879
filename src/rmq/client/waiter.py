"""Sleeping until there is work: a pub/sub subscription to a topic's wake channel.

The scripts publish on the channel only when a sleeping consumer has something new to do
(work became ready where there was none, an earlier due time, a released key), so the
channel is quiet under load and a consumer never polls while idle.

:class:`Waiter` (threads) and :class:`AsyncWaiter` (asyncio) have one interface:
``wait(timeout)`` sleeps until woken or the timeout passes, ``drain()`` forgets wake-ups
already received, ``close()`` ends the subscription.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from typing import Any

from ..storage.keys import wake_channel
from .connect import AsyncRedis
from .error_map import map_errors

__all__ = ["Waiter", "AsyncWaiter"]


class Waiter:
    """A subscription to one topic's wake channel, for threads. Its one connection is used
    by one thread at a time: ``wait`` and ``drain`` take turns under a lock (consumers of one
    client on one topic share the subscription; a drain reading the socket while another
    thread waits on it corrupts the replies of both)."""

    def __init__(self, client: Any, topic: str):
        self._pubsub = client.pubsub(ignore_subscribe_messages=True)
        self._lock = threading.Lock()
        with map_errors():
            self._pubsub.subscribe(wake_channel(topic))
            # Wait for the subscription to be confirmed: only then is no publish missed.
            self._pubsub.get_message(timeout=1.0, ignore_subscribe_messages=False)

    def wait(self, timeout: float) -> bool:
        """Sleep until woken or ``timeout`` seconds pass; True when woken."""
        with self._lock, map_errors():
            woke = self._pubsub.get_message(timeout=max(0.0, timeout)) is not None
            self._drain()
            return woke

    def drain(self) -> None:
        """Forget wake-ups already received (the caller is about to look for work anyway)."""
        with self._lock, map_errors():
            self._drain()

    def _drain(self) -> None:
        while self._pubsub.get_message(timeout=0.0) is not None:
            pass

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a broken connection is not an error
            self._pubsub.close()


class AsyncWaiter:
    """:class:`Waiter` for asyncio tasks (which take turns on its connection the same way);
    open one with :meth:`subscribe`."""

    def __init__(self, pubsub: Any, node: AsyncRedis):
        self._pubsub = pubsub
        self._node = node
        self._lock = asyncio.Lock()

    @classmethod
    async def subscribe(cls, node: AsyncRedis, topic: str) -> AsyncWaiter:
        """Subscribe on ``node``, a client of one server that the waiter owns from now on."""
        pubsub = node.pubsub(ignore_subscribe_messages=True)
        with map_errors():
            await pubsub.subscribe(wake_channel(topic))
            # Wait for the subscription to be confirmed: only then is no publish missed.
            await pubsub.get_message(timeout=1.0, ignore_subscribe_messages=False)
        return cls(pubsub, node)

    async def wait(self, timeout: float) -> bool:
        """Sleep until woken or ``timeout`` seconds pass; True when woken."""
        async with self._lock:
            with map_errors():
                woke = await self._pubsub.get_message(timeout=max(0.0, timeout)) is not None
                await self._drain()
            return woke

    async def drain(self) -> None:
        """Forget wake-ups already received (the caller is about to look for work anyway)."""
        async with self._lock:
            with map_errors():
                await self._drain()

    async def _drain(self) -> None:
        while await self._pubsub.get_message(timeout=0.0) is not None:
            pass

    async def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a broken connection is not an error
            await self._pubsub.aclose()
            await self._node.aclose()
