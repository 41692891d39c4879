"""Watching what a group could claim, for a batch consumer that waits for its batch to fill
while the messages stay pending (docs/semantics.md, "Batch handlers").

``look`` reads every slot's ready messages (``storage/ready_look.py``); ``wait`` sleeps
until any key that look read changes, or the timeout passes. The scripts publish on the
topic's wake channel only when ready work appears where there was none, so a consumer that
waits with some messages ready would hear nothing of the sends that fill its batch. Redis
itself says when: the look runs on a connection with ``CLIENT TRACKING`` on, redirected to
a connection of the same server subscribed to ``__redis__:invalidate``, which then receives
one message the first time any key the look read is written (a send, a claim, a promotion,
an ack that unlocks a key). Nobody polls, and a send costs nothing more: Redis looks up each
written key in its tracking table anyway, once any client tracks.

On a cluster each master that serves a slot of the topic gets its pair of connections (an
invalidation comes from the server that holds the key). Where tracking is refused (an ACL
without ``CLIENT`` or the ``__redis__:invalidate`` channel) or a connection breaks, the watch
falls back to the client's own executor for the look and to the topic's wake channel with
the timeout for the wait (said once in the log), and tries tracking again a minute later.
"""

from __future__ import annotations

import contextlib
import logging
import select
import time
from collections.abc import Callable
from typing import Any, Protocol

import redis

from ..message import Priority
from ..storage.calls import Call, Op
from ..storage.ready_look import ReadyLook, look_calls, read_look
from ..storage.registry import TopicInfo
from ..storage.trace import trace_argument
from .connect import connect_node
from .error_map import map_errors
from .executor import Executor
from .waiter import AsyncWaiter, Waiter

__all__ = ["ReadyWatch", "AsyncReadyWatch", "WatchedClient", "AsyncWatchedClient",
           "INVALIDATIONS"]

INVALIDATIONS = "__redis__:invalidate"  # where Redis sends a redirected client's invalidations
_RETRY_S = 60.0  # after tracking failed, how long the watch waits on the wake channel alone
log = logging.getLogger("rmq.client")


class WatchedClient(Protocol):
    """What a watch uses of its client (``rmq.Client``)."""

    url: str
    redis: redis.Redis | redis.RedisCluster
    redis_options: dict[str, Any]

    def topic(self, name: str, *, fresh: bool = False) -> TopicInfo: ...

    def now(self) -> int: ...

    def waiter(self, topic: str) -> Waiter: ...

    def _run(self, flow: Op[Any]) -> Any: ...


class _Node:
    """One server's pair: ``tracking`` runs the looks with ``CLIENT TRACKING`` on,
    redirected to ``listener``, which is subscribed to the invalidations."""

    def __init__(self, connect: Callable[[], redis.Redis]):
        self.listener = connect()
        self.tracking = connect()
        self.executor = Executor(self.tracking)
        with map_errors():
            conn = self.listener.connection
            assert conn is not None  # a single-connection client holds one
            conn.send_command("CLIENT", "ID")
            self.listener_id = int(conn.read_response())
            conn.send_command("SUBSCRIBE", INVALIDATIONS)
            conn.read_response()  # the subscription's confirmation

    @property
    def conn(self) -> Any:
        return self.listener.connection

    def run(self, calls: list[Call]) -> list[Any]:
        """``calls`` on the tracking connection, tracking on first (again: a connection that
        redis-py reconnected has it off). NOLOOP: the look's own promotions wake nobody."""
        on = Call(("CLIENT", "TRACKING", "ON", "REDIRECT", self.listener_id, "NOLOOP"))
        return self.executor([on, *calls])[1:]

    def drain(self) -> bool:
        """Read what has arrived; True if anything had."""
        got = False
        with map_errors():
            while self.conn.can_read(timeout=0):
                self.conn.read_response()
                got = True
        return got

    def close(self) -> None:
        for client in (self.listener, self.tracking):
            with contextlib.suppress(Exception):  # closing a broken connection is no error
                client.close()


class ReadyWatch:
    """``look`` and ``wait`` for one group of one topic (module doc); ``close`` when done."""

    def __init__(self, client: WatchedClient, topic: str, group: str):
        self.client, self.topic, self.group = client, topic, group
        self._nodes: dict[tuple[str, int] | None, _Node] = {}
        self._refused_until = 0.0  # tracking failed: the wake channel until then
        self._tracked = False  # the last look ran on tracking connections

    def look(self, count: int, urgent: int = Priority.HIGH) -> ReadyLook:
        """What the group could claim now (``storage/ready_look.py``), counting at least
        ``count`` messages; ``urgent``: the priority that makes ``ReadyLook.urgent``."""
        client = self.client
        info = client.topic(self.topic)
        calls = look_calls(self.topic, info.generation, self.group, info.settings, count,
                           client.now(), trace_argument(self.topic, info.settings))
        self._tracked = False
        if time.monotonic() >= self._refused_until:
            try:
                replies = self._run_tracked(calls)
            except Exception as exc:  # noqa: BLE001 - see below
                # Whatever went wrong, the look still runs (below): a watch never stops a
                # consumer, it only makes it wait less.
                self._give_up(exc)
            else:
                self._tracked = True
                return read_look(self.topic, replies, urgent)
        return read_look(self.topic, client._run(_replies(calls)), urgent)

    def wait(self, timeout: float) -> bool:
        """Sleep until a key the last look read changes (or, without tracking, until the
        topic's wake channel speaks) or ``timeout`` seconds pass; True when woken."""
        if timeout <= 0:
            return False
        if not self._tracked:
            return self.client.waiter(self.topic).wait(timeout)
        nodes = list(self._nodes.values())
        try:
            if any(node.drain() for node in nodes):
                return True
            readable, _, _ = select.select([node.conn._sock for node in nodes], [], [],
                                           timeout)
            return bool(readable) and any(node.drain() for node in nodes)
        except Exception as exc:  # noqa: BLE001 - as in look: the wait falls back
            self._give_up(exc)
            return True  # look again, untracked

    def close(self) -> None:
        for node in self._nodes.values():
            node.close()
        self._nodes.clear()

    def _run_tracked(self, calls: list[Call]) -> list[Any]:
        """The look's calls on each server's tracking connection, what arrived before
        drained first (it is older than this look)."""
        by_node: dict[tuple[str, int] | None, list[int]] = {}
        cluster = self.client.redis if isinstance(self.client.redis, redis.RedisCluster) \
            else None
        for i, call in enumerate(calls):
            where = None
            if cluster is not None:
                node = cluster.get_node_from_key(call.keys[0])
                where = (node.host, node.port)
            by_node.setdefault(where, []).append(i)
        for where in set(self._nodes) - set(by_node):  # a node that serves no slot now
            self._nodes.pop(where).close()
        replies: list[Any] = [None] * len(calls)
        for where, at in by_node.items():
            node = self._nodes.get(where)
            if node is None:
                node = self._nodes[where] = _Node(self._connector(where))
            node.drain()
            for i, reply in zip(at, node.run([calls[i] for i in at]), strict=True):
                replies[i] = reply
        return replies

    def _connector(self, where: tuple[str, int] | None) -> Callable[[], redis.Redis]:
        url, options = self.client.url, self.client.redis_options
        if where is None:
            return lambda: connect_node(url, **options)
        return lambda: connect_node(url, where[0], where[1], **options)

    def _give_up(self, error: BaseException) -> None:
        """Tracking failed: the wake channel and the timeout until ``_RETRY_S`` from now."""
        if not self._refused_until:
            log.info("batch consumers of topic %r wait on its wake channel and their "
                     "timeout, not on the keys they read: %s: %s", self.topic,
                     type(error).__name__, error)
        self._refused_until = time.monotonic() + _RETRY_S
        self._tracked = False
        self.close()


def _replies(calls: list[Call]) -> Op[list[Any]]:
    """The calls as one round trip of a flow, for the client's own executor."""
    replies = yield calls
    return replies


class AsyncWatchedClient(Protocol):
    """What an asyncio watch uses of its client (``rmq.AsyncClient``)."""

    async def topic(self, name: str, *, fresh: bool = False) -> TopicInfo: ...

    def now(self) -> int: ...

    async def waiter(self, topic: str) -> AsyncWaiter: ...

    async def _run(self, flow: Op[Any]) -> Any: ...


class AsyncReadyWatch:
    """:class:`ReadyWatch` for asyncio code, with the fallback's wait: on the topic's wake
    channel and the timeout. (An ``AsyncClient``'s own ``@handler`` consumers run on the
    threaded runtime, whose watch tracks the keys it reads.)"""

    def __init__(self, client: AsyncWatchedClient, topic: str, group: str):
        self.client, self.topic, self.group = client, topic, group

    async def look(self, count: int, urgent: int = Priority.HIGH) -> ReadyLook:
        """See :meth:`ReadyWatch.look`."""
        info = await self.client.topic(self.topic)
        calls = look_calls(self.topic, info.generation, self.group, info.settings, count,
                           self.client.now(), trace_argument(self.topic, info.settings))
        return read_look(self.topic, await self.client._run(_replies(calls)), urgent)

    async def wait(self, timeout: float) -> bool:
        """Sleep until the topic's wake channel speaks or ``timeout`` seconds pass."""
        if timeout <= 0:
            return False
        return await (await self.client.waiter(self.topic)).wait(timeout)

    async def close(self) -> None:
        """Nothing of its own to close (the waiter is the client's)."""
