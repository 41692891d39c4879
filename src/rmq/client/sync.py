"""``rmq.Client``: the synchronous entry point (SPEC §2-4)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any

import redis

from ..errors import InvalidMessage, UnknownTopic
from ..message import DeadLetter, Message, SendCounts, SendResult
from ..settings import DEFAULT_GROUP, TopicSettings, check_group_name, check_topic_name
from ..storage import history, registry
from ..storage import peek as peek_ops
from ..storage import queue as queue_ops
from ..storage.calls import Op, drive
from ..storage.history import TopicHistory
from ..storage.peek import PeekPage
from ..storage.registry import ConsumerInfo, TopicInfo
from ..storage.snapshot import SnapshotRow, snapshot_slot
from ..storage.stats import TopicStats, collect
from .coalesce import SendCoalescer
from .connection import SyncExecutor, connect, resolve_url
from .outgoing import MISSING, _as_bytes, prepare, prepare_batch
from .waiter import Waiter

__all__ = ["Client", "Clock", "system_clock"]

Clock = Callable[[], int]


def system_clock() -> int:
    """Wall-clock epoch milliseconds. Producers and consumers must agree on time (run NTP):
    due times and leases are compared across machines."""
    return time.time_ns() // 1_000_000


def check_count(count: object) -> int:
    if isinstance(count, bool) or not isinstance(count, int) or not 1 <= count <= 10_000:
        raise InvalidMessage(f"count must be an integer from 1 to 10000, got {count!r}")
    return count


class Client:
    """A connection to RMQ. Thread-safe; one per process is enough.

    ``url``: a ``redis://``, ``rediss://`` or ``unix://`` URL of a Redis 7+ server or of any
    node of a Redis Cluster; None uses ``RMQ_REDIS_URL``, else the embedded server that RMQ
    starts itself. ``clock`` returns epoch ms (tests pass a controllable one).
    ``registry_ttl``: how long topic settings and bindings are cached, in seconds: changes
    made elsewhere reach this client within that time.
    """

    def __init__(self, url: str | None = None, *, clock: Clock = system_clock,
                 registry_ttl: float = 1.0, **redis_options: Any):
        self.url = resolve_url(url)  # what None resolved to: hand it to other processes
        self.redis = connect(self.url, **redis_options)
        self.clock = clock
        self.registry_ttl = registry_ttl
        self._execute = SyncExecutor(self.redis)
        self._cache: dict[str, tuple[float, TopicInfo]] = {}
        self._lock = threading.Lock()
        self._waiters: dict[str, Waiter] = {}
        self._handlers: list[Any] = []
        # concurrent single sends from several threads share round trips (coalesce.py)
        self._sends = SendCoalescer(self._run)

    @property
    def is_cluster(self) -> bool:
        return isinstance(self.redis, redis.RedisCluster)

    def _run(self, op: Op[Any]) -> Any:
        return drive(op, self._execute)

    def close(self) -> None:
        """Close the connections (and any wake-up subscriptions)."""
        for waiter in self._waiters.values():
            waiter.close()
        self.redis.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- registry -----------------------------------------------------------------------

    def create_topic(self, name: str, **settings: Any) -> TopicSettings:
        """Register a topic (SPEC §1 settings). Idempotent for the same settings; other
        settings for an existing topic raise TopicConflict."""
        check_topic_name(name)
        created = self._run(registry.create_topic(name, TopicSettings.build(**settings)))
        self._cache.pop(name, None)
        return created

    def alter_topic(self, name: str, **changes: Any) -> TopicSettings:
        """Change settings of a topic (not ``slots``); consumers see it within seconds."""
        check_topic_name(name)
        altered = self._run(registry.alter_topic(name, changes))
        self._cache.pop(name, None)
        return altered

    def delete_topic(self, name: str) -> None:
        """Delete a topic and every message it holds, in every state."""
        info = self.topic(name, fresh=True)
        self._run(registry.delete_topic(info))
        self._cache.pop(name, None)

    def topics(self) -> list[str]:
        """Names of every registered topic."""
        return self._run(registry.list_topics())

    def topic(self, name: str, *, fresh: bool = False) -> TopicInfo:
        """The topic's registry entry (cached for ``registry_ttl`` unless ``fresh``)."""
        check_topic_name(name)
        now = time.monotonic()
        cached = self._cache.get(name)
        if cached and not fresh and cached[0] > now:
            return cached[1]
        info = self._run(registry.load_info(name))
        self._cache[name] = (now + self.registry_ttl, info)
        return info

    def bind(self, topic: str, group: str) -> bool:
        """Bind ``group`` to ``topic``: it receives every message sent from now on.
        Returns False if it was bound already."""
        self.topic(topic)
        added = self._run(registry.bind(topic, check_group_name(group)))
        self._cache.pop(topic, None)
        return added

    def unbind(self, topic: str, group: str) -> bool:
        """Stop delivering new messages to ``group``; what it holds stays until purged."""
        self.topic(topic)
        removed = self._run(registry.unbind(topic, check_group_name(group)))
        self._cache.pop(topic, None)
        return removed

    def pause(self, topic: str) -> None:
        """Consumers stop claiming from ``topic`` (sends are still accepted)."""
        self.topic(topic)
        self._run(registry.set_paused(topic, True))
        self._cache.pop(topic, None)

    def resume(self, topic: str) -> None:
        self.topic(topic)
        self._run(registry.set_paused(topic, False))
        self._cache.pop(topic, None)

    def consumers(self, topic: str, dead_after: float = 10.0) -> list[ConsumerInfo]:
        """Registered consumers of ``topic``; ``alive`` is false after ``dead_after`` s of
        silence."""
        self.topic(topic)
        return self._run(registry.list_consumers(topic, time.time(), dead_after))

    # -- sending ------------------------------------------------------------------------

    def send(self, topic: str, body: Any = MISSING, *, json: Any = MISSING,
             priority: int | None = None, delay_ms: float | None = None,
             deliver_at: Any = None, slot_basis: bytes | str | None = None,
             key: bytes | str | None = None) -> SendResult:
        """Send one message (SPEC §2). Merges into an identical pending message of each group
        (earliest due time and highest priority win); never into one in flight. Sends made
        at once from several threads travel together (group commit, ``rmq.coalesce``)."""
        info = self.topic(topic)
        now = self.clock()
        message = prepare(info.settings, now, body, json=json, priority=priority,
                          delay_ms=delay_ms, deliver_at=deliver_at, slot_basis=slot_basis,
                          key=key)
        merged = self._sends.send(topic, tuple(info.groups), message, now)
        return SendResult(message.slot, merged)

    def send_many(self, topic: str, items: Iterable[Any]) -> SendCounts:
        """Send a batch: each item a body, or a dict of ``send`` options (``body`` or
        ``json`` plus any others). Validated whole before anything is written; travels as
        one script call per slot."""
        info = self.topic(topic)
        now = self.clock()
        batch = prepare_batch(info.settings, now, items)
        merged = self._run(queue_ops.send(topic, info.groups, batch, now))
        return SendCounts(len(batch), sum(merged))

    # -- consuming ------------------------------------------------------------------------

    def claim(self, topic: str, group: str = DEFAULT_GROUP, count: int = 100, *,
              lease: float | None = None, wait: float | None = None,
              ack: Message | Sequence[Message] = ()) -> list[Message]:
        """Claim up to ``count`` due messages, highest priority first, then FIFO. Each is in
        flight for ``lease`` seconds (default: the topic's visibility_timeout) until acked,
        nacked or extended. Returns at once, possibly empty, unless ``wait`` seconds are
        given: then it sleeps until work arrives, a delayed message is due, or time is up.
        A paused topic yields nothing. ``ack``: deliveries to acknowledge first, in the same
        round trip (a loop's previous batch; use ``ack()`` to learn how many still held
        their lease)."""
        deadline = None if wait is None else time.monotonic() + wait
        waiter = None
        while True:
            messages, next_due = self.claim_until(topic, group, count, lease=lease, ack=ack)
            ack = ()
            if messages or deadline is None:
                return messages
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return messages
            if waiter is None:
                # Subscribe, then claim again: a send between the two is not missed.
                waiter = self.waiter(topic)
                waiter.drain()
                continue
            if next_due is not None:
                remaining = min(remaining, max(0.0, (next_due - self.clock()) / 1000))
            waiter.wait(remaining)

    def claim_until(self, topic: str, group: str = DEFAULT_GROUP, count: int = 100, *,
                    lease: float | None = None, ack: Message | Sequence[Message] = ()
                    ) -> tuple[list[Message], int | None]:
        """``claim`` without waiting, also returning, when fewer than ``count`` were due, the
        epoch ms at which the next delayed message falls due (None if there is none): what
        a consumer needs to know how long it may sleep."""
        info = self.topic(topic)
        check_group_name(group)
        check_count(count)
        acks = [ack] if isinstance(ack, Message) else list(ack)
        if info.paused:
            self.ack(acks)
            return [], None
        return self._run(queue_ops.with_acks(acks, not self.is_cluster, queue_ops.claim(
            topic, group, info.settings, count, self.clock(),
            lease or info.settings.visibility_timeout, not self.is_cluster)))

    def waiter(self, topic: str) -> Waiter:
        """A subscription that wakes when ``topic`` gets new ready work (one per topic)."""
        with self._lock:
            if topic not in self._waiters:
                self._waiters[topic] = Waiter(self.redis, topic)
            return self._waiters[topic]

    def ack(self, messages: Message | Sequence[Message]) -> int:
        """Acknowledge: the messages are done and removed. Returns how many still held their
        lease (a late ack, after the lease expired, changes nothing: it is redelivered)."""
        batch = [messages] if isinstance(messages, Message) else list(messages)
        return self._run(queue_ops.ack(batch, not self.is_cluster)) if batch else 0

    def nack(self, message: Message, error: str | BaseException = "failed") -> str | None:
        """The delivery failed: retried after the backoff, or dead-lettered once delivered
        1 + max_retries times. Returns "retried", "dead", or None if the lease was gone."""
        info = self.topic(message.topic)
        text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
        return self._run(queue_ops.fail(message, text, info.settings, self.clock()))

    def release(self, messages: Sequence[Message]) -> int:
        """Give back deliveries not yet started, at their old place, without counting an
        attempt. Returns how many were given back."""
        return self._run(queue_ops.release(messages, self.clock())) if messages else 0

    def extend(self, messages: Message | Sequence[Message], seconds: float) -> list[bool]:
        """Extend leases to ``seconds`` from now; per message, False if its lease was lost."""
        batch = [messages] if isinstance(messages, Message) else list(messages)
        if not batch:
            return []
        return self._run(queue_ops.extend(batch, self.clock() + int(seconds * 1000)))

    def recover(self, topic: str | None = None) -> int:
        """Return expired leases to pending now (of ``topic``, or of every topic), counting
        the attempt. Returns how many deliveries were recovered."""
        names = [topic] if topic is not None else self.topics()
        total = 0
        for name in names:
            try:
                info = self.topic(name)
            except UnknownTopic:
                if topic is not None:
                    raise
                continue
            retried, dead = self._run(queue_ops.recover(
                name, registry.groups_with_data(info), info.settings, self.clock()))
            total += retried + dead
        return total

    def dead_letters(self, topic: str, group: str = DEFAULT_GROUP) -> list[DeadLetter]:
        """The group's dead letters, oldest first."""
        info = self.topic(topic)
        return self._run(queue_ops.dead_letters(topic, check_group_name(group), info.settings))

    def requeue_dead(self, topic: str, group: str = DEFAULT_GROUP,
                     ids: Iterable[str] | None = None) -> int:
        """Put dead letters (``ids``, or all) back to ready with attempts reset."""
        info = self.topic(topic)
        return self._run(queue_ops.requeue_dead(topic, check_group_name(group), info.settings,
                                                None if ids is None else list(ids), self.clock()))

    def purge_dead(self, topic: str, group: str = DEFAULT_GROUP) -> int:
        """Delete the group's dead letters; returns how many."""
        info = self.topic(topic)
        return self._run(queue_ops.purge_dead(topic, check_group_name(group), info.settings))

    def stats(self, topic: str) -> TopicStats:
        """Per group and slot: delayed, ready by priority, in flight, dead, oldest ready age,
        and the counters sent, merged, acked, retried, dead."""
        info = self.topic(topic, fresh=True)
        return self._run(collect(topic, registry.groups_with_data(info), info.settings.slots,
                                 info.paused, self.clock()))

    def snapshot(self, topic: str, *, groups: Sequence[str] | None = None,
                 slots: Sequence[int] | None = None) -> Iterator[SnapshotRow]:
        """Every message the topic holds, in every state including dead letters, without
        changing anything; read one (group, slot) at a time. A message that changes state
        during the read may show twice or not at all."""
        info = self.topic(topic, fresh=True)
        for group in groups or registry.groups_with_data(info):
            for slot in slots if slots is not None else range(info.settings.slots):
                yield from self._run(snapshot_slot(topic, group, slot, self.clock()))

    # -- worker runtime -------------------------------------------------------------------

    def handler(self, topic: str, **options: Any) -> Callable[[Callable[..., Any]], Any]:
        """Decorator: ``@client.handler("topic", group=..., concurrency=...)`` makes the
        function a consumer of ``topic``; ``client.run()`` runs every decorated consumer."""
        from ..runtime import Consumer

        def decorate(function: Callable[..., Any]) -> Callable[..., Any]:
            consumer = Consumer(self, topic, function, **options)
            function.consumer = consumer  # type: ignore[attr-defined]
            self._handlers.append(consumer)
            return function

        return decorate

    def run(self) -> None:
        """Run every ``@handler`` consumer until SIGINT/SIGTERM, then shut down gracefully."""
        from ..runtime import run_all

        run_all(self._handlers)

    # -- throughput history (the console's charts) ----------------------------------------

    def record_history(self, topic: str) -> bool:
        """Take ``topic``'s throughput sample for the current 5-second bucket of Redis's
        clock, unless another client (a console, a consumer) already took it; returns
        whether this call did. Costs one script call when it did not."""
        info = self.topic(topic)
        return self._run(history.record(topic, registry.groups_with_data(info),
                                        info.settings.slots, info.paused, self.clock()))

    def history(self, topic: str, minutes: float = 60.0) -> TopicHistory:
        """The topic's samples of the last ``minutes`` (at most an hour) per group, with
        rates per second and merge rate between consecutive samples (``TopicHistory``)."""
        info = self.topic(topic)
        return self._run(history.read(topic, registry.groups_with_data(info), minutes))

    # -- looking at stored messages (the console's peeks and finder) ----------------------

    def peek(self, topic: str, state: str, group: str = DEFAULT_GROUP, *,
             slot: int | None = None, offset: int = 0, limit: int = 50) -> PeekPage:
        """A page of ``group``'s messages in ``state`` (ready, delayed, in_flight, dead):
        of ``slot``, or of every slot in slot order. Reads only the page (and each slot's
        size); changes nothing."""
        info = self.topic(topic)
        return self._run(peek_ops.peek(topic, check_group_name(group), state,
                                       info.settings.slots, slot, offset, limit, self.clock()))

    def find_messages(self, topic: str, body: bytes | str | None = None, *,
                      key: bytes | str | None = None,
                      every_slot: bool = False) -> list[SnapshotRow]:
        """Every stored message, in any state and group, with this ``body`` (and ``key``:
        a keyed message is found with its key) or, with no body, every message of ``key``.
        Looks in the slot a send of them goes to; ``every_slot`` (which reads the whole
        topic) also finds messages sent with another ``slot_basis``."""
        info = self.topic(topic)
        return self._run(peek_ops.find(
            topic, registry.groups_with_data(info), info.settings.slots,
            None if body is None else _as_bytes("body", body),
            None if key is None else _as_bytes("key", key), every_slot, self.clock()))
