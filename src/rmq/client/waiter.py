"""Sleeping until there is work: a pub/sub subscription to a topic's wake channel.

The scripts publish on the channel only when a sleeping consumer has something new to do
(work became ready where there was none, an earlier due time, a released key), so the
channel is quiet under load and a consumer never polls while idle.

A client keeps one subscription per topic, shared by everything of the client that sleeps
on the topic: its consumers of every group, and ``claim(wait=...)`` calls. One thread (or
task) at a time reads its connection (a drain reading the socket while another reads it
too corrupts the replies of both), but no caller holds it for the others while it sleeps,
and every wake-up read reaches every caller: each caller (a thread, a task) keeps how many
wake-ups it has seen, and ``wait`` returns once more have been read, whoever read them.
Both matter where groups share a client: a consumer whose group has nothing to do (its
filter rejected the latest sends, say) sleeps its idle timeout at a time; holding the
connection meanwhile would hold back the drain another group's consumer does before each
claim, so that group would claim once per such sleep; and a wake-up read by one sleeper
would be lost for the rest.

:class:`Waiter` (threads) and :class:`AsyncWaiter` (asyncio) have one interface:
``wait(timeout)`` sleeps until woken or the timeout passes, ``drain()`` forgets wake-ups
already received, ``close()`` ends the subscription.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import weakref
from typing import Any

from ..storage.keys import wake_channel
from .connect import AsyncRedis
from .error_map import map_errors

__all__ = ["Waiter", "AsyncWaiter"]


class Waiter:
    """A subscription to one topic's wake channel, for threads (module doc: one reader at a
    time, every wake-up counted for every thread)."""

    def __init__(self, client: Any, topic: str):
        self._pubsub = client.pubsub(ignore_subscribe_messages=True)
        self._changed = threading.Condition()  # a read ended
        self._reading = False  # a thread reads the connection (outside the condition's lock)
        self._received = 0  # wake-ups read so far
        self._seen = threading.local()  # .count: of those, what this thread has seen
        with map_errors():
            self._pubsub.subscribe(wake_channel(topic))
            # Wait for the subscription to be confirmed: only then is no publish missed.
            self._pubsub.get_message(timeout=1.0, ignore_subscribe_messages=False)

    def wait(self, timeout: float) -> bool:
        """Sleep until woken or ``timeout`` seconds pass; True when woken (by a wake-up read
        since this thread last drained or woke)."""
        deadline = time.monotonic() + timeout
        while True:
            with self._changed:
                seen = getattr(self._seen, "count", self._received)
                if self._received != seen:
                    self._seen.count = self._received
                    return True
                self._seen.count = seen
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                if self._reading:  # another thread reads: it counts what comes, for all
                    self._changed.wait(remaining)
                    continue
                self._reading = True
            self._read(remaining)

    def drain(self) -> None:
        """Forget wake-ups already received (the caller is about to look for work anyway)."""
        with self._changed:
            reading, self._reading = self._reading, True
        if not reading:
            self._read(0.0)
        with self._changed:
            self._seen.count = self._received

    def _read(self, timeout: float) -> None:
        """Read what the channel brought within ``timeout`` s (taken: ``_reading`` set)."""
        got = 0
        try:
            with map_errors():
                if self._pubsub.get_message(timeout=max(0.0, timeout)) is not None:
                    got = 1
                    while self._pubsub.get_message(timeout=0.0) is not None:
                        got += 1
        finally:
            with self._changed:
                self._reading = False
                self._received += got
                self._changed.notify_all()

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a broken connection is not an error
            self._pubsub.close()


class AsyncWaiter:
    """:class:`Waiter` for asyncio tasks (the same sharing, per task); open one with
    :meth:`subscribe`."""

    def __init__(self, pubsub: Any, node: AsyncRedis):
        self._pubsub = pubsub
        self._node = node
        self._read_ended: asyncio.Event | None = None  # set: a task reads the connection
        self._received = 0  # wake-ups read so far
        # of those, what each task has seen
        self._seen: weakref.WeakKeyDictionary[asyncio.Task[Any], int] = (
            weakref.WeakKeyDictionary())

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
        """Sleep until woken or ``timeout`` seconds pass; True when woken (by a wake-up read
        since this task last drained or woke)."""
        task = asyncio.current_task()
        assert task is not None  # awaited in a task
        deadline = time.monotonic() + timeout
        seen = self._seen.setdefault(task, self._received)
        while self._received == seen:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            if self._read_ended is not None:  # another task reads: it counts for all
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):
                        await self._read_ended.wait()
                continue
            await self._read(remaining)
        self._seen[task] = self._received
        return True

    async def drain(self) -> None:
        """Forget wake-ups already received (the caller is about to look for work anyway)."""
        task = asyncio.current_task()
        assert task is not None  # awaited in a task
        if self._read_ended is None:
            await self._read(0.0)
        self._seen[task] = self._received

    async def _read(self, timeout: float) -> None:
        """Read what the channel brought within ``timeout`` s (no other task reads)."""
        ended = self._read_ended = asyncio.Event()
        try:
            with map_errors():
                if await self._pubsub.get_message(timeout=max(0.0, timeout)) is not None:
                    self._received += 1
                    while await self._pubsub.get_message(timeout=0.0) is not None:
                        self._received += 1
        finally:
            self._read_ended = None
            ended.set()

    async def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a broken connection is not an error
            await self._pubsub.aclose()
            await self._node.aclose()
