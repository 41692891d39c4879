"""``rmq.AsyncClient``: the asyncio twin of :class:`rmq.Client` (SPEC §2-4).

It runs the very same sans-IO operations (``storage/queue_ops.py``, ``registry.py``,
``stats.py``, ``storage/snapshot_ops.py``) through ``async_connection.drive`` on
``redis.asyncio``. ``AsyncClient(url)`` does no I/O: the connection opens on first use, on
``async with``, or with ``await AsyncClient.connect(url)``.
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from typing import Any

import redis.asyncio as aredis

from ..errors import UnknownTopic
from ..message import DeadLetter, Message, SendCounts, SendResult
from ..settings import DEFAULT_GROUP, TopicSettings, check_group_name, check_topic_name
from ..storage import history, registry
from ..storage import peek as peek_ops
from ..storage import queue as queue_ops
from ..storage.calls import Op
from ..storage.history import TopicHistory
from ..storage.peek import PeekPage
from ..storage.registry import ConsumerInfo, TopicInfo
from ..storage.snapshot import SnapshotRow, snapshot_slot
from ..storage.stats import TopicStats, collect
from .async_connection import AsyncExecutor, AsyncRedis, AsyncWaiter, drive, open_async
from .coalesce import AsyncSendCoalescer
from .outgoing import MISSING, _as_bytes, prepare, prepare_batch
from .sync import Clock, check_count, system_clock

__all__ = ["AsyncClient"]


class AsyncClient:
    """A connection to RMQ for asyncio; the methods are those of :class:`rmq.Client`,
    awaited (``snapshot`` is an async iterator). Safe to share between the tasks of one event
    loop. Arguments as for ``Client``; a ``retry`` among ``redis_options`` must be a
    ``redis.asyncio.retry.Retry``."""

    def __init__(self, url: str | None = None, *, clock: Clock = system_clock,
                 registry_ttl: float = 1.0, **redis_options: Any):
        self.url = url
        self.clock = clock
        self.registry_ttl = registry_ttl
        self.redis_options = redis_options
        self.redis: AsyncRedis | None = None
        self._execute: AsyncExecutor | None = None
        self._opening = asyncio.Lock()
        self._cache: dict[str, tuple[float, TopicInfo]] = {}
        self._loading: dict[str, asyncio.Future[TopicInfo]] = {}
        self._waiters: dict[str, AsyncWaiter] = {}
        self._handlers: list[tuple[str, Callable[..., Any], dict[str, Any]]] = []
        self._sends = AsyncSendCoalescer(self._run)  # concurrent sends share round trips

    @classmethod
    async def connect(cls, url: str | None = None, **options: Any) -> AsyncClient:
        """A client with its connection open (``options`` as for the constructor)."""
        client = cls(url, **options)
        await client.open()
        return client

    async def open(self) -> None:
        """Connect (done on first use anyway): resolves the URL like ``Client`` (starting
        the embedded server if needed), detects a cluster and warns about unsafe config."""
        async with self._opening:
            if self._execute is not None:
                return
            self.url, self.redis = await open_async(self.url, **self.redis_options)
            self._execute = AsyncExecutor(self.redis)

    @property
    def is_cluster(self) -> bool:
        return isinstance(self.redis, aredis.RedisCluster)

    async def _run(self, op: Op[Any]) -> Any:
        if self._execute is None:
            await self.open()
        assert self._execute is not None
        return await drive(op, self._execute)

    async def close(self) -> None:
        """Async twin of Client.close."""
        for waiter in self._waiters.values():
            await waiter.close()
        self._waiters.clear()
        if self.redis is not None:
            await self.redis.aclose()

    async def __aenter__(self) -> AsyncClient:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- registry -----------------------------------------------------------------------

    async def create_topic(self, name: str, **settings: Any) -> TopicSettings:
        """Async twin of Client.create_topic."""
        check_topic_name(name)
        created = await self._run(registry.create_topic(name, TopicSettings.build(**settings)))
        self._cache.pop(name, None)
        return created

    async def alter_topic(self, name: str, **changes: Any) -> TopicSettings:
        """Async twin of Client.alter_topic."""
        check_topic_name(name)
        altered = await self._run(registry.alter_topic(name, changes))
        self._cache.pop(name, None)
        return altered

    async def delete_topic(self, name: str) -> None:
        """Async twin of Client.delete_topic."""
        info = await self.topic(name, fresh=True)
        await self._run(registry.delete_topic(info))
        self._cache.pop(name, None)

    async def topics(self) -> list[str]:
        """Async twin of Client.topics."""
        return await self._run(registry.list_topics())

    async def topic(self, name: str, *, fresh: bool = False) -> TopicInfo:
        """Async twin of Client.topic (cached for ``registry_ttl`` unless ``fresh``)."""
        check_topic_name(name)
        now = time.monotonic()
        cached = self._cache.get(name)
        if cached and not fresh and cached[0] > now:
            return cached[1]
        # Tasks that find the entry stale together share one load: hundreds of concurrent
        # senders must not each open a connection for it at the same moment.
        loading = self._loading.get(name)
        if loading is None or fresh:
            loading = asyncio.ensure_future(self._run(registry.load_info(name)))
            if not fresh:
                self._loading[name] = loading
                loading.add_done_callback(lambda _: self._loading.pop(name, None))
        info = await asyncio.shield(loading)
        self._cache[name] = (now + self.registry_ttl, info)
        return info

    async def _change(self, topic: str, op: Op[Any]) -> Any:
        await self.topic(topic)
        result = await self._run(op)
        self._cache.pop(topic, None)
        return result

    async def bind(self, topic: str, group: str) -> bool:
        """Async twin of Client.bind."""
        return await self._change(topic, registry.bind(topic, check_group_name(group)))

    async def unbind(self, topic: str, group: str) -> bool:
        """Async twin of Client.unbind."""
        return await self._change(topic, registry.unbind(topic, check_group_name(group)))

    async def pause(self, topic: str) -> None:
        """Async twin of Client.pause."""
        await self._change(topic, registry.set_paused(topic, True))

    async def resume(self, topic: str) -> None:
        """Async twin of Client.resume."""
        await self._change(topic, registry.set_paused(topic, False))

    async def consumers(self, topic: str, dead_after: float = 10.0) -> list[ConsumerInfo]:
        """Async twin of Client.consumers."""
        await self.topic(topic)
        return await self._run(registry.list_consumers(topic, time.time(), dead_after))

    # -- sending ------------------------------------------------------------------------

    async def send(self, topic: str, body: Any = MISSING, *, json: Any = MISSING,
                   priority: int | None = None, delay_ms: float | None = None,
                   deliver_at: Any = None, slot_basis: bytes | str | None = None,
                   key: bytes | str | None = None) -> SendResult:
        """Async twin of Client.send; sends made at once by several tasks travel together."""
        info = await self.topic(topic)
        now = self.clock()
        message = prepare(info.settings, now, body, json=json, priority=priority,
                          delay_ms=delay_ms, deliver_at=deliver_at, slot_basis=slot_basis,
                          key=key)
        merged = await self._sends.send(topic, tuple(info.groups), message, now)
        return SendResult(message.slot, merged)

    async def send_many(self, topic: str, items: Iterable[Any]) -> SendCounts:
        """Async twin of Client.send_many."""
        info = await self.topic(topic)
        now = self.clock()
        batch = prepare_batch(info.settings, now, items)
        merged = await self._run(queue_ops.send(topic, info.groups, batch, now))
        return SendCounts(len(batch), sum(merged))

    # -- consuming ------------------------------------------------------------------------

    async def claim(self, topic: str, group: str = DEFAULT_GROUP, count: int = 100, *,
                    lease: float | None = None, wait: float | None = None,
                    ack: Message | Sequence[Message] = ()) -> list[Message]:
        """Async twin of Client.claim; ``wait`` sleeps on the wake channel, not the loop."""
        deadline = None if wait is None else time.monotonic() + wait
        waiter = None
        while True:
            messages, next_due = await self.claim_until(topic, group, count, lease=lease,
                                                        ack=ack)
            ack = ()
            if messages or deadline is None:
                return messages
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return messages
            if waiter is None:
                # Subscribe, then claim again: a send between the two is not missed.
                waiter = await self.waiter(topic)
                await waiter.drain()
                continue
            if next_due is not None:
                remaining = min(remaining, max(0.0, (next_due - self.clock()) / 1000))
            await waiter.wait(remaining)

    async def claim_until(self, topic: str, group: str = DEFAULT_GROUP, count: int = 100, *,
                          lease: float | None = None, ack: Message | Sequence[Message] = ()
                          ) -> tuple[list[Message], int | None]:
        """Async twin of Client.claim_until."""
        info = await self.topic(topic)
        check_group_name(group)
        check_count(count)
        acks = [ack] if isinstance(ack, Message) else list(ack)
        if info.paused:
            await self.ack(acks)
            return [], None
        return await self._run(queue_ops.with_acks(acks, not self.is_cluster, queue_ops.claim(
            topic, group, info.settings, count, self.clock(),
            lease or info.settings.visibility_timeout, not self.is_cluster)))

    async def waiter(self, topic: str) -> AsyncWaiter:
        """Async twin of Client.waiter (one subscription per topic)."""
        if self._execute is None:
            await self.open()
        if topic not in self._waiters:
            assert self.redis is not None
            waiter = await AsyncWaiter.subscribe(self.redis, topic)
            if topic in self._waiters:  # another task subscribed meanwhile
                await waiter.close()
            else:
                self._waiters[topic] = waiter
        return self._waiters[topic]

    async def ack(self, messages: Message | Sequence[Message]) -> int:
        """Async twin of Client.ack."""
        batch = [messages] if isinstance(messages, Message) else list(messages)
        return await self._run(queue_ops.ack(batch, not self.is_cluster)) if batch else 0

    async def nack(self, message: Message, error: str | BaseException = "failed") -> str | None:
        """Async twin of Client.nack."""
        info = await self.topic(message.topic)
        text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        return await self._run(queue_ops.fail(message, text, info.settings, self.clock()))

    async def release(self, messages: Sequence[Message]) -> int:
        """Async twin of Client.release."""
        return await self._run(queue_ops.release(messages, self.clock())) if messages else 0

    async def extend(self, messages: Message | Sequence[Message], seconds: float) -> list[bool]:
        """Async twin of Client.extend."""
        batch = [messages] if isinstance(messages, Message) else list(messages)
        if not batch:
            return []
        return await self._run(queue_ops.extend(batch, self.clock() + int(seconds * 1000)))

    async def recover(self, topic: str | None = None) -> int:
        """Async twin of Client.recover."""
        names = [topic] if topic is not None else await self.topics()
        total = 0
        for name in names:
            try:
                info = await self.topic(name)
            except UnknownTopic:
                if topic is not None:
                    raise
                continue
            retried, dead = await self._run(queue_ops.recover(
                name, registry.groups_with_data(info), info.settings, self.clock()))
            total += retried + dead
        return total

    async def dead_letters(self, topic: str, group: str = DEFAULT_GROUP) -> list[DeadLetter]:
        """Async twin of Client.dead_letters."""
        info = await self.topic(topic)
        return await self._run(queue_ops.dead_letters(topic, check_group_name(group),
                                                      info.settings))

    async def requeue_dead(self, topic: str, group: str = DEFAULT_GROUP,
                           ids: Iterable[str] | None = None) -> int:
        """Async twin of Client.requeue_dead."""
        info = await self.topic(topic)
        return await self._run(queue_ops.requeue_dead(
            topic, check_group_name(group), info.settings, None if ids is None else list(ids),
            self.clock()))

    async def purge_dead(self, topic: str, group: str = DEFAULT_GROUP) -> int:
        """Async twin of Client.purge_dead."""
        info = await self.topic(topic)
        return await self._run(queue_ops.purge_dead(topic, check_group_name(group),
                                                    info.settings))

    async def stats(self, topic: str) -> TopicStats:
        """Async twin of Client.stats."""
        info = await self.topic(topic, fresh=True)
        return await self._run(collect(topic, registry.groups_with_data(info),
                                       info.settings.slots, info.paused, self.clock()))

    async def snapshot(self, topic: str, *, groups: Sequence[str] | None = None,
                       slots: Sequence[int] | None = None) -> AsyncIterator[SnapshotRow]:
        """Async twin of Client.snapshot: ``async for row in client.snapshot(topic)``."""
        info = await self.topic(topic, fresh=True)
        for group in groups or registry.groups_with_data(info):
            for slot in slots if slots is not None else range(info.settings.slots):
                for row in await self._run(snapshot_slot(topic, group, slot, self.clock())):
                    yield row

    # -- worker runtime -------------------------------------------------------------------

    def handler(self, topic: str, **options: Any) -> Callable[[Callable[..., Any]], Any]:
        """Twin of Client.handler: ``@client.handler(topic, ...)``; ``await client.run()``."""

        def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
            self._handlers.append((topic, function, options))
            return function

        return decorate

    async def run(self) -> None:
        """Async twin of Client.run: the ``@handler`` consumers run (on the threaded worker
        runtime, with their own sync connection) until SIGINT/SIGTERM or cancellation."""
        from ..runtime import Consumer
        from .sync import Client

        await self.open()
        options = {k: v for k, v in self.redis_options.items() if k != "retry"}  # async only
        client = await asyncio.to_thread(Client, self.url, clock=self.clock,
                                         registry_ttl=self.registry_ttl, **options)
        loop, stop = asyncio.get_running_loop(), asyncio.Event()
        signals = (signal.SIGINT, signal.SIGTERM)
        for sig in signals:
            loop.add_signal_handler(sig, stop.set)
        consumers: list[Consumer] = []
        try:
            for topic, function, handler_options in self._handlers:
                consumers.append(Consumer(client, topic, function, **handler_options))
                await asyncio.to_thread(consumers[-1].start)
            await stop.wait()
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)
            for consumer in consumers:
                await asyncio.to_thread(consumer.stop)
            client.close()

    # -- throughput history, peeks and finder (the console) ------------------------------

    async def record_history(self, topic: str) -> bool:
        """Async twin of Client.record_history."""
        info = await self.topic(topic)
        return await self._run(history.record(topic, registry.groups_with_data(info),
                                              info.settings.slots, info.paused, self.clock()))

    async def history(self, topic: str, minutes: float = 60.0) -> TopicHistory:
        """Async twin of Client.history."""
        info = await self.topic(topic)
        return await self._run(history.read(topic, registry.groups_with_data(info), minutes))

    async def peek(self, topic: str, state: str, group: str = DEFAULT_GROUP, *,
                   slot: int | None = None, offset: int = 0, limit: int = 50) -> PeekPage:
        """Async twin of Client.peek."""
        info = await self.topic(topic)
        return await self._run(peek_ops.peek(topic, check_group_name(group), state,
                                             info.settings.slots, slot, offset, limit,
                                             self.clock()))

    async def find_messages(self, topic: str, body: bytes | str | None = None, *,
                            key: bytes | str | None = None,
                            every_slot: bool = False) -> list[SnapshotRow]:
        """Async twin of Client.find_messages."""
        info = await self.topic(topic)
        return await self._run(peek_ops.find(
            topic, registry.groups_with_data(info), info.settings.slots,
            None if body is None else _as_bytes("body", body),
            None if key is None else _as_bytes("key", key), every_slot, self.clock()))
