"""Watching what a group could claim, for a batch consumer that waits for its batch to fill
while the messages stay pending (docs/semantics.md, "Batch handlers").

``look`` says what the group could claim now from every slot's ready messages
(``storage/ready_look.py``); ``wait`` sleeps until a key that look read changes, or the
timeout passes. The scripts publish on the topic's wake channel only when ready work appears
where there was none, so a consumer that waits with some messages ready would hear nothing
of the sends that fill its batch. Redis itself says when: the looks run on a connection with
``CLIENT TRACKING`` on, redirected to a connection of the same server subscribed to
``__redis__:invalidate``, which then receives the names of the keys a look read as each is
first written (a send, a claim, a promotion, an ack that unlocks a key). Nobody polls, and a
send costs nothing more: Redis looks up each written key in its tracking table anyway, once
any client tracks.

The watch keeps each slot's last reply while no key of the slot was named since, so a look
reads again only the slots named (a send names its one slot) and those whose next delayed
message fell due: what a send costs a waiting consumer is one ``head.lua`` call, however
many slots the topic has. A look reads every slot when it starts, when the topic's settings,
generation or the batch change, and when a tracking connection was replaced (the keys it
tracked are then forgotten by Redis: ``CLIENT ID`` tells).

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
import socket
import time
from collections.abc import Callable
from typing import Any, Protocol

import redis

from ..message import Priority
from ..storage.calls import Call, Op
from ..storage.ready_look import ReadyLook, look_calls, next_due_of, read_look
from ..storage.registry import TopicInfo
from ..storage.trace import trace_argument
from .connect import connect_node
from .error_map import map_errors
from .executor import Executor
from .gather_lead import GatherLead
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

    def wake(self, topic: str) -> None: ...

    def _run(self, flow: Op[Any]) -> Any: ...


class _Node:
    """One server's pair: ``tracking`` runs the looks with ``CLIENT TRACKING`` on,
    redirected to ``listener``, which is subscribed to the invalidations."""

    def __init__(self, connect: Callable[[], redis.Redis]):
        self.listener = connect()
        self.tracking = connect()
        self.executor = Executor(self.tracking)
        self.tracking_id: int | None = None  # the tracking connection's, at the last run
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

    def run(self, calls: list[Call]) -> tuple[bool, list[Any]]:
        """``calls`` on the tracking connection, tracking on first (again: a connection that
        redis-py reconnected has it off; NOLOOP: the look's own promotions wake nobody);
        and whether the connection is another than at the last run (what the last tracked
        is forgotten)."""
        on = Call(("CLIENT", "TRACKING", "ON", "REDIRECT", self.listener_id, "NOLOOP"))
        _, tracking_id, *replies = self.executor([on, Call(("CLIENT", "ID")), *calls])
        replaced = self.tracking_id is not None and tracking_id != self.tracking_id
        self.tracking_id = tracking_id
        return replaced, replies

    def drain(self) -> set[bytes] | None:
        """Read what has arrived: the names of the keys written since they were read (an
        empty set if nothing arrived), or None when Redis says every key may have changed
        (a flush)."""
        named: set[bytes] | None = set()
        with map_errors():
            while self.conn.can_read(timeout=0):
                _, _, keys = self.conn.read_response()
                if keys is None or named is None:
                    named = None
                else:
                    named.update(keys)
        return named

    def close(self) -> None:
        for client in (self.listener, self.tracking):
            with contextlib.suppress(Exception):  # closing a broken connection is no error
                client.close()


class ReadyWatch:
    """``look`` and ``wait`` for one group of one topic (module doc); ``close`` when done.
    ``lead`` and ``hand_on``: whether this consumer is the one of its group that gathers
    (``gather_lead.py``)."""

    def __init__(self, client: WatchedClient, topic: str, group: str):
        self.client, self.topic, self.group = client, topic, group
        self._lead = GatherLead(client.redis, topic, group, lambda: client.wake(topic))
        # What ``interrupt`` writes to, to end a wait on the tracking connections.
        self._interrupted, self._interrupter = socket.socketpair()
        self._nodes: dict[tuple[str, int] | None, _Node] = {}
        self._refused_until = 0.0  # tracking failed: the wake channel until then
        self._tracked = False  # the last look ran on tracking connections
        self._basis: tuple[Any, ...] | None = None  # what the kept replies were read for
        self._heads: dict[int, Any] = {}  # slot -> its reply, no key of it written since
        self._just_read: list[int] = []  # the slots the last read of stale ones read
        self._slot_of: dict[bytes, int] = {}  # a key the looks read -> its slot
        self._where: dict[int, tuple[str, int] | None] = {}  # slot -> its node's address

    def look(self, count: int, urgent: int = Priority.HIGH) -> ReadyLook:
        """What the group could claim now (``storage/ready_look.py``), counting at least
        ``count`` messages; ``urgent``: the priority that makes ``ReadyLook.urgent``."""
        client = self.client
        info = client.topic(self.topic)
        now, trace = client.now(), trace_argument(self.topic, info.settings)
        self._tracked = False
        if time.monotonic() >= self._refused_until:
            try:
                replies = self._tracked_look(info, count, now, trace)
            except Exception as exc:  # noqa: BLE001 - see below
                # Whatever went wrong, the look still runs (below): a watch never stops a
                # consumer, it only makes it wait less.
                self._give_up(exc)
            else:
                self._tracked = True
                return read_look(self.topic, replies, urgent)
        calls = look_calls(self.topic, info.generation, self.group, info.settings, count, now,
                           trace)
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
            if self._drain():
                return True
            readable, _, _ = select.select([self._interrupted,
                                            *(node.conn._sock for node in nodes)], [], [],
                                           timeout)
            if self._interrupted in readable:
                self._interrupted.recv(4096)
                return True
            return bool(readable) and self._drain()
        except Exception as exc:  # noqa: BLE001 - as in look: the wait falls back
            self._give_up(exc)
            return True  # look again, untracked

    def interrupt(self) -> None:
        """End a ``wait`` under way now (another thread's call: the consumer stops); a wait
        without tracking is woken by the topic's wake channel instead."""
        with contextlib.suppress(OSError):  # closed: nothing waits any more
            self._interrupter.send(b"!")

    def lead(self, holder: str, lease: float) -> bool:
        """True while ``holder`` is the consumer of the group that gathers (the lead taken
        or renewed for ``lease`` seconds); False while another is."""
        return self._lead.take(holder, lease)

    def hand_on(self) -> None:
        """Give the group's lead up, if this watch holds it, waking the others to take it."""
        self._lead.hand_on()

    def close(self) -> None:
        """Close its connections, handing the lead on if it holds it."""
        with contextlib.suppress(Exception):  # the others take it when its lease lapses
            self.hand_on()
        self._close_tracking()
        self._interrupted.close()
        self._interrupter.close()

    def _close_tracking(self) -> None:
        for node in self._nodes.values():
            node.close()
        self._nodes.clear()
        self._forget()

    def _forget(self) -> None:
        self._basis = None
        self._heads.clear()
        self._slot_of.clear()
        self._where.clear()

    def _tracked_look(self, info: TopicInfo, count: int, now: int, trace: str) -> list[Any]:
        """Every slot's reply: those kept, and the slots that changed since read again."""
        basis = (info.generation, info.settings, count, trace)
        if basis != self._basis:
            self._forget()
            self._basis = basis
        self._drain()
        if self._read_stale(info, count, now, trace):
            # A tracking connection was replaced: Redis forgot what the kept replies read.
            self._heads = {slot: self._heads[slot] for slot in self._just_read}
            if self._read_stale(info, count, now, trace):
                raise ConnectionError("the tracking connections were replaced twice in a look")
        return [self._heads[slot] for slot in range(info.settings.slots)]

    def _read_stale(self, info: TopicInfo, count: int, now: int, trace: str) -> bool:
        """Read the slots without a kept reply, or whose next delayed message fell due;
        True if a tracking connection was replaced since the last read (when no slot needs
        reading, each connection is asked, with no call)."""
        stale = self._just_read = [slot for slot in range(info.settings.slots)
                                   if slot not in self._heads or _due(self._heads[slot], now)]
        if not stale:  # still, a connection replaced would never be told of: ask each
            return any([node.run([])[0] for node in self._nodes.values()])
        calls = look_calls(self.topic, info.generation, self.group, info.settings, count, now,
                           trace, stale)
        replaced, replies = self._run_tracked(stale, calls)
        for slot, call in zip(stale, calls, strict=True):
            self._slot_of.update((key.encode(), slot) for key in call.keys)
        self._heads.update(zip(stale, replies, strict=True))
        return replaced

    def _drain(self) -> bool:
        """Forget the replies of the slots whose keys were written since they were read (of
        every slot on a flush); True if any word arrived."""
        got = False
        for node in self._nodes.values():
            named = node.drain()
            if named is None:
                self._heads.clear()
                got = True
            elif named:
                for key in named:
                    self._heads.pop(self._slot_of.get(key, -1), None)
                got = True
        return got

    def _run_tracked(self, slots: list[int], calls: list[Call]) -> tuple[bool, list[Any]]:
        """The calls (of ``slots``) on each server's tracking connection; and whether a
        tracking connection was replaced since its last run."""
        by_node: dict[tuple[str, int] | None, list[int]] = {}
        for i, slot in enumerate(slots):
            by_node.setdefault(self._node_of(slot, calls[i]), []).append(i)
        replies: list[Any] = [None] * len(calls)
        replaced = False
        for where, at in by_node.items():
            node = self._nodes.get(where)
            if node is None:
                node = self._nodes[where] = _Node(self._connector(where))
            node_replaced, node_replies = node.run([calls[i] for i in at])
            replaced = replaced or node_replaced
            for i, reply in zip(at, node_replies, strict=True):
                replies[i] = reply
        return replaced, replies

    def _node_of(self, slot: int, call: Call) -> tuple[str, int] | None:
        """The address of the master serving ``slot`` (None on a single node), as redis-py's
        slot map said when the slot was first read: a slot that moved since answers MOVED,
        and the watch gives up, forgetting them all."""
        if slot not in self._where:
            where = None
            if isinstance(self.client.redis, redis.RedisCluster):
                node = self.client.redis.get_node_from_key(call.keys[0])
                where = (node.host, node.port)
            self._where[slot] = where
        return self._where[slot]

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
        self._close_tracking()


def _due(reply: Any, now: int) -> bool:
    """A slot's kept reply names a delayed message due by ``now``: read it again."""
    due = next_due_of(reply)
    return due is not None and due <= now


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
