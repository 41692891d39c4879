"""``rmq.AsyncClient``: :class:`rmq.Client` for asyncio (SPEC §2-4).

Every method runs the same flow of :class:`~rmq.client.base.BaseClient` as ``Client``'s;
what this class adds is how effects are performed: awaited round trips on ``redis.asyncio``,
registry loads shared by tasks, the tasks' group commit, and sleeping on a pub/sub
connection. ``AsyncClient(url)`` does no I/O: the connection opens on first use, on
``async with``, or with ``await AsyncClient.connect(url)``.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import redis.asyncio as aredis

from .. import otel
from ..errors import NotReplicated, RMQError, UnknownTopic
from ..message import Claimed, DeadLetter, Message, SendCounts, SendResult
from ..properties import PropertyValue
from ..runtime import Consumer, start_each
from ..runtime.checker import CheckBack
from ..settings import (
    DEFAULT_GROUP,
    GroupLimits,
    TopicSettings,
    check_group_name,
    check_topic_name,
)
from ..storage.cancel import Cancelled
from ..storage.isolation import TOPIC_PROBLEMS, PerTopic, problem_of
from ..storage.registry import ConsumerInfo, ConsumerState, TopicInfo
from .async_views import AsyncViewMethods
from .base import MISSING, BaseClient, Flow, Load, Sleep, Subscribe, log
from .clock import Clock
from .cluster import AsyncClusterExecutor
from .connect import AsyncRedis, open_async, open_async_node
from .effects import AwaitCapacity
from .error_map import map_errors
from .executor import AsyncExecutor
from .group_commit import AsyncGroupCommit
from .limited import KEEP, Keep
from .ready_watch import AsyncReadyWatch
from .replication import GIVE_BACK_FAILED, BatchNotReplicated, Replication, claimed_in
from .stop_watch import StopWatch
from .sync import Client
from .tx_handles import AsyncTransactionMethods
from .urls import check_url
from .waiter import AsyncWaiter

__all__ = ["AsyncClient"]

T = TypeVar("T")
Handler = TypeVar("Handler", bound=Callable[..., Any])


class AsyncClient(BaseClient, AsyncTransactionMethods, AsyncViewMethods):
    """A connection to RMQ for asyncio; the methods are those of :class:`rmq.Client`,
    awaited (``snapshot`` is an async iterator). Safe to share between the tasks of one event
    loop. Arguments as for ``Client``; a ``retry`` among ``redis_options`` must be a
    ``redis.asyncio.retry.Retry``."""

    def __init__(self, url: str | None = None, *, clock: Clock | None = None,
                 registry_ttl: float = 1.0, replicas: int = 0, replica_timeout: float = 1.0,
                 replica_fsync: bool = False, **redis_options: Any):
        super().__init__(clock=clock, registry_ttl=registry_ttl)
        self.replication = Replication.of(replicas, replica_timeout, replica_fsync,
                                          redis_options.get("socket_timeout"))
        self.url = check_url(url) if url else url  # no I/O: the connection opens on use
        self.redis_options = redis_options
        self.redis: AsyncRedis | None = None
        self._execute: AsyncExecutor | AsyncClusterExecutor | None = None
        self._opening = asyncio.Lock()
        self._loading: dict[str, asyncio.Lock] = {}
        self._waiters: dict[str, AsyncWaiter] = {}
        self._handlers: list[tuple[str, Callable[..., Any], dict[str, Any]]] = []
        self._checkers = []  # (topic, fn) of @checker: check-backs run by run()
        self._commit: AsyncGroupCommit | None = None  # concurrent sends share round trips
        self._stops: StopWatch | None = None  # what to stop, of claimed ones (on open)

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
            self._connected(isinstance(self.redis, aredis.RedisCluster))
            self._execute = (AsyncClusterExecutor(self.redis, self.replication)
                             if isinstance(self.redis, aredis.RedisCluster)
                             else AsyncExecutor(self.redis, self.replication))
            self._commit = AsyncGroupCommit(self._execute)
            # (its own threads and a connection each: a redis.asyncio retry is not theirs)
            self._stops = StopWatch(self.url, {k: v for k, v in self.redis_options.items()
                                               if k != "retry"})
            await self._run(self.replication.check_server())
            await self._run(self._now())  # measures the server's clock

    async def _run(self, flow: Flow[T]) -> T:
        """Run ``flow`` to its value, performing each effect it yields."""
        if self._execute is None:
            await self.open()
        unreplicated: BatchNotReplicated | None = None
        try:
            effect = next(flow)
            while True:
                try:
                    result = await self._perform(effect)
                except Exception as exc:  # the flow may handle it (recover skips a topic)
                    if isinstance(exc, BatchNotReplicated) and type(effect) is list:
                        # stored all the same: the operation finishes, then raises
                        # (replication.py)
                        unreplicated = unreplicated or exc
                        effect = flow.send(exc.replies)
                        continue
                    self._failed(exc)
                    effect = flow.throw(exc)
                else:
                    effect = flow.send(result)
        except StopIteration as done:
            if unreplicated is not None:
                unreplicated.value = done.value
                raise unreplicated from None
            # A flow's return value: a Flow[T] returns T, which StopIteration does not type.
            return done.value  # type: ignore[no-any-return]

    def _perform(self, effect: Any) -> Awaitable[Any]:
        # Not a coroutine itself: it hands back the one to await, so a send passes through
        # one coroutine less (single sends from many tasks are where that shows).
        kind = type(effect)
        if kind is list:
            assert self._commit is not None
            return self._commit(effect) if effect else self._nothing()
        if kind is Load:
            return self._load_topic(effect.topic, effect.fresh)
        if kind is Subscribe:
            return self._drain(effect.topic)
        if kind is Sleep:
            return self._sleep(effect.topic, effect.seconds)
        if kind is AwaitCapacity:
            return self._await_capacity(effect.key, effect.seconds)
        raise TypeError(f"not an effect: {effect!r}")

    @staticmethod
    async def _nothing() -> list[Any]:
        return []

    async def _drain(self, topic: str) -> Any:
        return await (await self.waiter(topic)).drain()

    async def _await_capacity(self, key: str, seconds: float) -> bool:
        assert self.redis is not None  # effects run on an open client
        with map_errors():
            return await self.redis.blpop([key], timeout=seconds) is not None

    async def _sleep(self, topic: str, seconds: float) -> Any:
        return await (await self.waiter(topic)).wait(seconds)

    async def _load_topic(self, name: str, fresh: bool) -> TopicInfo:
        if fresh:
            return await self._run(self._load(name))
        # Tasks that find the entry stale together share one load: hundreds of concurrent
        # senders must not each open a connection for it at the same moment.
        async with self._loading.setdefault(name, asyncio.Lock()):
            cached = self._cached(name)
            return cached if cached is not None else await self._run(self._load(name))

    async def close(self) -> None:
        """Close the connections (and any wake-up subscriptions)."""
        for waiter in self._waiters.values():
            await waiter.close()
        self._waiters.clear()
        if self._stops is not None:
            self._stops.close()
        if self.redis is not None:
            await self.redis.aclose()

    async def __aenter__(self) -> AsyncClient:
        await self.open()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- registry (each method as Client's, awaited) ----------------------------------------

    async def create_topic(self, name: str, **settings: Any) -> TopicSettings:
        """See :meth:`rmq.Client.create_topic`."""
        return await self._run(self._create_topic(name, settings))

    async def alter_topic(self, name: str, **changes: Any) -> TopicSettings:
        """See :meth:`rmq.Client.alter_topic`."""
        return await self._run(self._alter_topic(name, changes))

    async def delete_topic(self, name: str) -> None:
        """See :meth:`rmq.Client.delete_topic`."""
        await self._run(self._delete_topic(name))

    async def topics(self) -> list[str]:
        """See :meth:`rmq.Client.topics`."""
        return await self._run(self._topics())

    async def topic(self, name: str, *, fresh: bool = False) -> TopicInfo:
        """See :meth:`rmq.Client.topic`."""
        return await self._run(self._topic(name, fresh))

    async def each_topic(self, read: Callable[[TopicInfo], Awaitable[T]]) -> PerTopic[T]:
        """See :meth:`rmq.Client.each_topic`; ``read`` is awaited."""
        entries = await self._run(self._topic_entries())
        results: dict[str, T] = {}
        broken = dict(entries.broken)
        for name, info in entries.results.items():
            try:
                results[name] = await read(info)
            except UnknownTopic:
                continue
            except TOPIC_PROBLEMS as exc:
                broken[name] = problem_of(exc)
        return PerTopic(results, dict(sorted(broken.items())))

    async def bind(self, topic: str, group: str, *, tags: str | None = None,
                   where: str | None = None, keep_filters: bool = False,
                   supersede: bool | None = None, supersede_limit: int | None = None) -> bool:
        """See :meth:`rmq.Client.bind`."""
        return await self._run(self._bind(topic, group, tags, where, keep_filters, supersede,
                                          supersede_limit))

    async def unbind(self, topic: str, group: str) -> bool:
        """See :meth:`rmq.Client.unbind`."""
        return await self._run(self._unbind(topic, group))

    async def pause(self, topic: str) -> None:
        """See :meth:`rmq.Client.pause`."""
        await self._run(self._set_paused(topic, True))

    async def resume(self, topic: str) -> None:
        """See :meth:`rmq.Client.resume`."""
        await self._run(self._set_paused(topic, False))

    async def set_limits(self, topic: str, group: str = DEFAULT_GROUP, *,
                         max_in_flight: int | None | Keep = KEEP,
                         rate: tuple[int, float] | None | Keep = KEEP,
                         max_batches: int | None | Keep = KEEP) -> GroupLimits:
        """See :meth:`rmq.Client.set_limits`."""
        return await self._run(self._fleet.set_limits(topic, group, max_in_flight, rate,
                                                      max_batches))

    async def limits(self, topic: str, group: str = DEFAULT_GROUP) -> GroupLimits:
        """See :meth:`rmq.Client.limits`."""
        return await self._run(self._fleet.limits(topic, group))

    async def wait_for_capacity(self, topic: str, group: str = DEFAULT_GROUP,
                                timeout: float = 10.0) -> bool:
        """See :meth:`rmq.Client.wait_for_capacity`."""
        return await self._run(self._fleet.wait_for_capacity(topic, group, timeout))

    async def consumers(self, topic: str, dead_after: float = 10.0) -> list[ConsumerInfo]:
        """See :meth:`rmq.Client.consumers`."""
        return await self._run(self._consumers(topic, dead_after))

    async def heartbeat(self, state: ConsumerState) -> None:
        """See :meth:`rmq.Client.heartbeat`."""
        await self._run(self._heartbeat(state))

    async def forget_consumer(self, topic: str, consumer_id: str) -> None:
        """See :meth:`rmq.Client.forget_consumer`."""
        await self._run(self._forget_consumer(topic, consumer_id))

    async def wake(self, topic: str) -> None:
        """See :meth:`rmq.Client.wake`."""
        await self._run(self._wake(topic))

    # -- sending ------------------------------------------------------------------------

    async def send(self, topic: str, body: Any = MISSING, *, json: Any = MISSING,
                   priority: int | None = None, delay_ms: float | None = None,
                   deliver_at: Any = None, slot_basis: bytes | str | None = None,
                   key: bytes | str | None = None, tag: str | None = None,
                   properties: Mapping[str, PropertyValue] | None = None,
                   version: int | None = None) -> SendResult:
        """See :meth:`rmq.Client.send`; sends made at once by several tasks travel
        together."""
        options = (json, priority, delay_ms, deliver_at, slot_basis, key, tag, properties,
                   version)
        active = otel.tracer()
        if active is None:
            return await self._run(self._send(topic, body, options))
        await self.open()  # the URL the spans name (resolved on connecting)
        with otel.producer_span(active, topic, self.url) as span:
            return otel.sent(span, await self._run(self._send(topic, body, options,
                                                              otel.traceparent(span))))

    async def send_many(self, topic: str, items: Iterable[Any]) -> SendCounts:
        """See :meth:`rmq.Client.send_many`."""
        active = otel.tracer()
        if active is None:
            return await self._run(self._send_many(topic, items))
        await self.open()
        with otel.producer_span(active, topic, self.url) as span:
            return otel.sent_many(span, await self._run(self._send_many(
                topic, items, otel.traceparent(span))))

    # -- consuming ------------------------------------------------------------------------

    async def claim(self, topic: str, group: str = DEFAULT_GROUP, count: int = 100, *,
                    lease: float | None = None, wait: float | None = None,
                    ack: Message | Sequence[Message] = (), holder: str | None = None
                    ) -> list[Message]:
        """See :meth:`rmq.Client.claim`; ``wait`` sleeps on the wake channel, not the loop."""
        await self._watch_stops(topic)
        try:
            active = otel.tracer()
            if active is None:
                return await self._run(self._claim(topic, group, count, lease, wait, ack,
                                                   holder))
            await self.open()
            with otel.receive_span(active, topic, group, self.url) as span:
                return otel.received(span, await self._run(self._claim(
                    topic, group, count, lease, wait, ack, holder)))
        except BatchNotReplicated as short:  # as rmq.Client.claim: given back
            await self._give_back(short)
            raise

    async def _watch_stops(self, topic: str) -> None:
        """Hear which of the topic's deliveries to stop (client/stop_watch.py) from before
        the first claim from it returns."""
        if self._stops is None or not self._stops.watching(topic):
            await self.open()
            assert self._stops is not None
            await asyncio.to_thread(self._stops.watch, topic)

    async def claim_due(self, topic: str, group: str = DEFAULT_GROUP, count: int = 100, *,
                        lease: float | None = None, ack: Message | Sequence[Message] = (),
                        holder: str | None = None) -> Claimed:
        """See :meth:`rmq.Client.claim_due`."""
        await self._watch_stops(topic)
        try:
            return await self._run(self._claim_due(topic, group, count, lease, ack, holder))
        except BatchNotReplicated as short:  # as rmq.Client.claim: given back
            await self._give_back(short)
            raise

    async def _give_back(self, short: BatchNotReplicated) -> None:
        """See ``rmq.Client._give_back``."""
        try:
            await self.release(claimed_in(short))
        except RMQError as exc:  # NotReplicated: released on the primary all the same
            if not isinstance(exc, NotReplicated):
                log.warning("%s: %s", GIVE_BACK_FAILED, exc)

    async def ready_watch(self, topic: str, group: str = DEFAULT_GROUP) -> AsyncReadyWatch:
        """See :meth:`rmq.Client.ready_watch`; its ``wait`` sleeps on the topic's wake
        channel and its timeout (client/ready_watch.py)."""
        check_topic_name(topic)
        check_group_name(group)
        return AsyncReadyWatch(self, topic, group)

    async def waiter(self, topic: str) -> AsyncWaiter:
        """See :meth:`rmq.Client.waiter` (one subscription per topic)."""
        check_topic_name(topic)
        if self._execute is None:
            await self.open()
        if topic not in self._waiters:
            assert self.url is not None
            node = open_async_node(self.url, **self.redis_options)
            waiter = await AsyncWaiter.subscribe(node, topic)
            if topic in self._waiters:  # another task subscribed meanwhile
                await waiter.close()
            else:
                self._waiters[topic] = waiter
        return self._waiters[topic]

    async def ack(self, messages: Message | Sequence[Message]) -> int:
        """See :meth:`rmq.Client.ack`."""
        return await self._run(self._ack(messages))

    async def nack(self, message: Message, error: str | BaseException = "failed") -> str | None:
        """See :meth:`rmq.Client.nack`."""
        return await self._run(self._nack(message, error))

    async def release(self, messages: Sequence[Message]) -> int:
        """See :meth:`rmq.Client.release`."""
        return await self._run(self._release(messages))

    async def extend(self, messages: Message | Sequence[Message], seconds: float) -> list[bool]:
        """See :meth:`rmq.Client.extend`."""
        return await self._run(self._extend(messages, seconds))

    async def recover(self, topic: str | None = None) -> int:
        """See :meth:`rmq.Client.recover`."""
        return await self._run(self._recover(topic))

    async def dead_letters(self, topic: str, group: str = DEFAULT_GROUP) -> list[DeadLetter]:
        """See :meth:`rmq.Client.dead_letters`."""
        return await self._run(self._dead_letters(topic, group))

    async def requeue_dead(self, topic: str, group: str = DEFAULT_GROUP,
                           ids: Iterable[str] | None = None) -> int:
        """See :meth:`rmq.Client.requeue_dead`."""
        return await self._run(self._requeue_dead(topic, group, ids))

    async def cancel(self, topic: str, message_id: str, group: str | None = None
                     ) -> Cancelled:
        """See :meth:`rmq.Client.cancel`."""
        return await self._run(self._cancel(topic, message_id, group))

    async def purge_dead(self, topic: str, group: str = DEFAULT_GROUP) -> int:
        """See :meth:`rmq.Client.purge_dead`."""
        return await self._run(self._purge_dead(topic, group))

    # -- worker runtime -------------------------------------------------------------------

    def handler(self, topic: str, **options: Any) -> Callable[[Handler], Handler]:
        """See :meth:`rmq.Client.handler`; the consumers are built by ``await run()``. The
        function itself is returned unchanged."""

        def decorate(function: Handler) -> Handler:
            self._handlers.append((topic, function, options))
            return function

        return decorate

    async def run(self) -> None:
        """The ``@handler`` consumers run until SIGINT/SIGTERM or cancellation, on the
        threaded worker runtime with a ``Client`` of their own (the runtime's threads block on
        Redis; they must not block this event loop)."""
        await self.open()
        options = {k: v for k, v in self.redis_options.items() if k != "retry"}  # async only
        replication = self.replication
        client = await asyncio.to_thread(
            Client, self.url, clock=self.clock, registry_ttl=self.registry_ttl,
            replicas=replication.replicas, replica_timeout=replication.timeout,
            replica_fsync=replication.fsync, **options)
        loop, stop = asyncio.get_running_loop(), asyncio.Event()
        signals = (signal.SIGINT, signal.SIGTERM)
        for sig in signals:
            loop.add_signal_handler(sig, stop.set)
        consumers: list[Consumer | CheckBack] = []
        try:
            consumers += [Consumer(client, topic, function, **handler_options)
                          for topic, function, handler_options in self._handlers]
            consumers += [CheckBack(client, topic, fn) for topic, fn in self._checkers]
            await asyncio.to_thread(start_each, consumers)
            await stop.wait()
        finally:
            for sig in signals:
                loop.remove_signal_handler(sig)
            for consumer in consumers:
                await asyncio.to_thread(consumer.stop)
            client.close()
