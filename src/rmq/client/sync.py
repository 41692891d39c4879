"""``rmq.Client``: the synchronous entry point (SPEC §2-4).

Every method runs one flow of :class:`~rmq.client.base.BaseClient`; what this class adds is
how effects are performed: round trips on a redis-py connection, registry loads shared by
threads, the threads' group commit, and sleeping on a pub/sub connection.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, TypeVar

import redis

from .. import otel
from ..errors import NotReplicated, RMQError, UnknownTopic
from ..message import Claimed, DeadLetter, Message, SendCounts, SendResult
from ..properties import PropertyValue
from ..runtime import Consumer, run_all
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
from .base import MISSING, BaseClient, Flow, Load, Sleep, Subscribe, log
from .clock import Clock
from .cluster import ClusterExecutor
from .connect import connect
from .effects import AwaitCapacity
from .error_map import map_errors
from .executor import Executor
from .group_commit import GroupCommit
from .limited import KEEP, Keep
from .ready_watch import ReadyWatch
from .replication import GIVE_BACK_FAILED, BatchNotReplicated, Replication, claimed_in
from .stop_watch import StopWatch
from .sync_views import ViewMethods
from .tx_handles import TransactionMethods
from .urls import resolve_url
from .waiter import Waiter

__all__ = ["Client"]

T = TypeVar("T")
Handler = TypeVar("Handler", bound=Callable[..., Any])


class Client(BaseClient, TransactionMethods, ViewMethods):
    """A connection to RMQ. Thread-safe; one per process is enough.

    ``url``: a ``redis://``, ``rediss://`` or ``unix://`` URL of a Redis 7+ server or of any
    node of a Redis Cluster; None uses ``RMQ_REDIS_URL``, else the embedded server that RMQ
    starts itself. ``clock``: None judges every due time and lease by the Redis server's
    clock (measured at connect and every few seconds, :class:`~rmq.client.clock.ServerClock`),
    so this host's wall clock never matters; a callable returning epoch ms is trusted
    instead (tests pass a controllable one).
    ``replicas``: every write that must not be lost (a send, an ack, a nack, a topic
    change...) returns only once that many replicas of the primary hold it, else raises
    :class:`~rmq.errors.NotReplicated` after ``replica_timeout`` seconds; 0 (the default):
    once the primary holds it. Soft state does not raise: a claim returns what it took,
    lease extensions and heartbeats wait for no replica. ``replica_fsync``: once it is also
    on the append-only file's disk of the primary and of those replicas (``WAITAOF``,
    Redis 7.2+).
    docs/reliability.md, "Replicated writes", says what each promises.
    ``registry_ttl``: how long topic settings and bindings are cached, in seconds: changes
    made elsewhere reach this client within that time. Other keyword arguments go to
    redis-py (a ``retry`` there replaces RMQ's reconnect policy).
    """

    def __init__(self, url: str | None = None, *, clock: Clock | None = None,
                 registry_ttl: float = 1.0, replicas: int = 0, replica_timeout: float = 1.0,
                 replica_fsync: bool = False, **redis_options: Any):
        super().__init__(clock=clock, registry_ttl=registry_ttl)
        self.replication = Replication.of(replicas, replica_timeout, replica_fsync,
                                          redis_options.get("socket_timeout"))
        self.url = resolve_url(url)  # what None resolved to: hand it to other processes
        self.redis_options = redis_options  # what connections of its own take (ready_watch)
        self.redis = connect(self.url, **redis_options)
        self._connected(isinstance(self.redis, redis.RedisCluster))
        self._execute = (ClusterExecutor(self.redis, self.replication)
                         if isinstance(self.redis, redis.RedisCluster)
                         else Executor(self.redis, self.replication))
        self._loading: dict[str, threading.Lock] = {}
        self._waiters: dict[str, Waiter] = {}
        self._waiters_lock = threading.Lock()
        self._stops = StopWatch(self.url, redis_options)  # what to stop, of claimed ones
        self._decorated: list[Consumer] = []
        self._check_backs = []  # of the @checker functions, run by run()
        # concurrent single sends from several threads share round trips
        self._commit = GroupCommit(self._execute)
        self._run(self.replication.check_server())
        self._run(self._now())  # measures the server's clock

    def _run(self, flow: Flow[T]) -> T:
        """Run ``flow`` to its value, performing each effect it yields."""
        unreplicated: BatchNotReplicated | None = None
        try:
            effect = next(flow)
            while True:
                try:
                    result = self._perform(effect)
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

    def _perform(self, effect: Any) -> Any:
        kind = type(effect)
        if kind is list:
            return self._commit(effect) if effect else []
        if kind is Load:
            return self._load_topic(effect.topic, effect.fresh)
        if kind is Subscribe:
            return self.waiter(effect.topic).drain()
        if kind is Sleep:
            return self.waiter(effect.topic).wait(effect.seconds)
        if kind is AwaitCapacity:
            with map_errors():
                return self.redis.blpop([effect.key], timeout=effect.seconds) is not None
        raise TypeError(f"not an effect: {effect!r}")

    def _load_topic(self, name: str, fresh: bool) -> TopicInfo:
        if fresh:
            return self._run(self._load(name))
        # Threads that find the entry stale together share one load: the first loads, the
        # others find it cached when the lock is theirs.
        with self._loading.setdefault(name, threading.Lock()):
            return self._cached(name) or self._run(self._load(name))

    def close(self) -> None:
        """Close the connections (and any wake-up subscriptions)."""
        for waiter in self._waiters.values():
            waiter.close()
        self._stops.close()
        self.redis.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- registry -----------------------------------------------------------------------

    def create_topic(self, name: str, **settings: Any) -> TopicSettings:
        """Register a topic (SPEC §1 settings) and return its settings. Run again on an
        existing topic it compares only the settings given (an application's start-up line
        keeps working after an operator altered another one): the same values write nothing,
        other values raise TopicConflict naming each differing setting."""
        return self._run(self._create_topic(name, settings))

    def alter_topic(self, name: str, **changes: Any) -> TopicSettings:
        """Change settings of a topic (not ``slots``); consumers see it within seconds."""
        return self._run(self._alter_topic(name, changes))

    def delete_topic(self, name: str) -> None:
        """Delete a topic and every message it holds, in every state."""
        self._run(self._delete_topic(name))

    def topics(self) -> list[str]:
        """Names of every registered topic."""
        return self._run(self._topics())

    def topic(self, name: str, *, fresh: bool = False) -> TopicInfo:
        """The topic's registry entry (cached for ``registry_ttl`` unless ``fresh``)."""
        return self._run(self._topic(name, fresh))

    def each_topic(self, read: Callable[[TopicInfo], T]) -> PerTopic[T]:
        """``read(info)`` for every topic whose registry entry is readable (read afresh),
        each topic apart from the others: a topic whose entry is broken, or whose ``read``
        meets keys RMQ did not write (CorruptRegistry, WrongKeyType, AccessDenied), is
        reported in ``broken`` with what is wrong; a topic deleted meanwhile is left out.
        Neither stops the other topics; Redis being away (RedisUnavailable) is raised."""
        entries = self._run(self._topic_entries())
        results: dict[str, T] = {}
        broken = dict(entries.broken)
        for name, info in entries.results.items():
            try:
                results[name] = read(info)
            except UnknownTopic:
                continue
            except TOPIC_PROBLEMS as exc:
                broken[name] = problem_of(exc)
        return PerTopic(results, dict(sorted(broken.items())))

    def bind(self, topic: str, group: str, *, tags: str | None = None,
             where: str | None = None, keep_filters: bool = False,
             supersede: bool | None = None, supersede_limit: int | None = None) -> bool:
        """Bind ``group`` to ``topic``: it receives every message sent from now on that its
        filters accept. ``tags``: a tag expression (``"*"`` or ``"a || b"``); ``where``: a
        SQL-92 condition on the message's properties and ``TAG`` (docs/semantics.md). They
        replace the group's filters (None: no filter) and reach producers within their
        ``registry_ttl``. ``keep_filters=True`` binds the group if it is not bound and keeps
        a bound group's filters (what a starting consumer does). An invalid expression
        raises InvalidFilter naming its column, and nothing is written.
        ``supersede=True``: a send of a message whose identity one of the group's consumers
        is running tells that delivery to stop (SPEC §14, docs/semantics.md "Supersede and
        cancel"), except after ``supersede_limit`` (default 3) supersedes in a row of one
        identity; ``False`` turns it off; None keeps a bound group's. Returns False if the
        group was bound already."""
        return self._run(self._bind(topic, group, tags, where, keep_filters, supersede,
                                    supersede_limit))

    def unbind(self, topic: str, group: str) -> bool:
        """Stop delivering new messages to ``group``; what it holds stays until purged."""
        return self._run(self._unbind(topic, group))

    def pause(self, topic: str) -> None:
        """Consumers stop claiming from ``topic`` (sends are still accepted)."""
        self._run(self._set_paused(topic, True))

    def resume(self, topic: str) -> None:
        """Consumers claim from ``topic`` again."""
        self._run(self._set_paused(topic, False))

    def set_limits(self, topic: str, group: str = DEFAULT_GROUP, *,
                   max_in_flight: int | None | Keep = KEEP,
                   rate: tuple[int, float] | None | Keep = KEEP,
                   max_batches: int | None | Keep = KEEP) -> GroupLimits:
        """Set the group's fleet-wide limits, held by all its consumers together (SPEC §10):
        at most ``max_in_flight`` of its messages in flight at once, at most ``rate=(count,
        seconds)`` of them claimed in any ``seconds``, at most ``max_batches`` of its claims
        in flight at once (a claim, a batch consumer's batch, holds one unit while any
        message it took is in flight: a pool of 4 GPUs rendering batches is
        ``max_batches=4``). A limit left out keeps its value; one given as None is removed.
        Bad values raise InvalidArgument, and limits of a group that is not bound to the
        topic UnboundGroup (removing them is allowed); either writes nothing. Returns the
        limits now stored."""
        return self._run(self._fleet.set_limits(topic, group, max_in_flight, rate,
                                                max_batches))

    def limits(self, topic: str, group: str = DEFAULT_GROUP) -> GroupLimits:
        """The group's fleet-wide limits as stored now (see :meth:`set_limits`)."""
        return self._run(self._fleet.limits(topic, group))

    def wait_for_capacity(self, topic: str, group: str = DEFAULT_GROUP,
                          timeout: float = 10.0) -> bool:
        """After a ``claim_due`` held back by the group's limits: sleep until a unit of
        capacity is given back to this waiter (an ack, a nack, a release), or until the
        limit may allow more (an expiring lease, the rate's next unit), at most ``timeout``
        seconds. Returns False at once when this client's last claim of the group was not
        held back (then wait for work instead)."""
        return self._run(self._fleet.wait_for_capacity(topic, group, timeout))

    def consumers(self, topic: str, dead_after: float = 10.0) -> list[ConsumerInfo]:
        """Registered consumers of ``topic``; ``alive`` is false after ``dead_after`` s of
        silence."""
        return self._run(self._consumers(topic, dead_after))

    def heartbeat(self, state: ConsumerState) -> None:
        """Report a running consumer to the registry (the worker runtime calls this)."""
        self._run(self._heartbeat(state))

    def forget_consumer(self, topic: str, consumer_id: str) -> None:
        """Remove a consumer from the registry (it stopped)."""
        self._run(self._forget_consumer(topic, consumer_id))

    def wake(self, topic: str) -> None:
        """Wake every consumer sleeping on ``topic`` (for instance to see that it stops)."""
        self._run(self._wake(topic))

    # -- sending ------------------------------------------------------------------------

    def send(self, topic: str, body: Any = MISSING, *, json: Any = MISSING,
             priority: int | None = None, delay_ms: float | None = None,
             deliver_at: Any = None, slot_basis: bytes | str | None = None,
             key: bytes | str | None = None, tag: str | None = None,
             properties: Mapping[str, PropertyValue] | None = None,
             version: int | None = None) -> SendResult:
        """Send one message (SPEC §2). Merges into an identical pending message of each group
        (earliest due time and highest priority win); never into one in flight. Sends made
        at once from several threads travel together (group commit, ``group_commit.py``).
        ``tag`` (one name) and ``properties`` (a dict of at most 64 identifiers to str, int,
        float or bool) are what the groups' filters see; both take part in merging.
        ``version`` (a topic merging by key; an integer 0 <= N < 2**53): a value older than
        the highest version sent for its key is dropped (``SendResult.outdated``;
        docs/semantics.md, "Versions"). With a
        tracer provider configured (the ``otel`` extra), a producer span covers it."""
        options = (json, priority, delay_ms, deliver_at, slot_basis, key, tag, properties,
                   version)
        active = otel.tracer()
        if active is None:
            return self._run(self._send(topic, body, options))
        with otel.producer_span(active, topic, self.url) as span:
            return otel.sent(span, self._run(self._send(topic, body, options,
                                                        otel.traceparent(span))))

    def send_many(self, topic: str, items: Iterable[Any]) -> SendCounts:
        """Send a batch: each item a body, or a dict of ``send`` options (``body`` or
        ``json`` plus any others). Validated whole before anything is written; travels as
        one script call per slot."""
        active = otel.tracer()
        if active is None:
            return self._run(self._send_many(topic, items))
        with otel.producer_span(active, topic, self.url) as span:
            return otel.sent_many(span, self._run(self._send_many(topic, items,
                                                                  otel.traceparent(span))))

    # -- consuming ------------------------------------------------------------------------

    def claim(self, topic: str, group: str = DEFAULT_GROUP, count: int = 100, *,
              lease: float | None = None, wait: float | None = None,
              ack: Message | Sequence[Message] = (), holder: str | None = None
              ) -> list[Message]:
        """Claim up to ``count`` due messages, highest priority first, then FIFO. Each is in
        flight for ``lease`` seconds (default: the topic's visibility_timeout) until acked,
        nacked or extended. Returns at once, possibly empty, unless ``wait`` seconds are
        given: then it sleeps until work arrives, a delayed message is due, or time is up.
        A paused topic yields nothing. ``ack``: deliveries to acknowledge first, in the same
        round trip (a loop's previous batch; use ``ack()`` to learn how many still held
        their lease). ``holder``: who claims, e.g. a consumer's id; the console and ``find``
        show it beside each in-flight message (a ``Consumer`` passes its own). With a
        tracer provider configured (the ``otel`` extra), a receive span covers it. With
        ``replicas``, an ``ack`` no replica confirms raises NotReplicated, and what the same
        call claimed is given back at once, no attempt counted."""
        self._stops.watch(topic)
        try:
            active = otel.tracer()
            if active is None:
                return self._run(self._claim(topic, group, count, lease, wait, ack, holder))
            with otel.receive_span(active, topic, group, self.url) as span:
                return otel.received(span, self._run(self._claim(topic, group, count, lease,
                                                                 wait, ack, holder)))
        except BatchNotReplicated as short:
            self._give_back(short)
            raise

    def claim_due(self, topic: str, group: str = DEFAULT_GROUP, count: int = 100, *,
                  lease: float | None = None, ack: Message | Sequence[Message] = (),
                  holder: str | None = None) -> Claimed:
        """``claim`` that never waits, and also says when the next delayed message falls
        due if fewer than ``count`` were due now: what a consumer loop needs to know how
        long it may sleep."""
        self._stops.watch(topic)
        try:
            return self._run(self._claim_due(topic, group, count, lease, ack, holder))
        except BatchNotReplicated as short:  # as in claim
            self._give_back(short)
            raise

    def _give_back(self, short: BatchNotReplicated) -> None:
        """Release what a claim took in the round trip whose ack fell short of replicas (a
        claim's own shortfall is no error, replication.py): the caller never receives it,
        and left in flight each would cost an attempt when its lease ran out."""
        try:
            self.release(claimed_in(short))
        except RMQError as exc:  # NotReplicated: released on the primary all the same
            if not isinstance(exc, NotReplicated):
                log.warning("%s: %s", GIVE_BACK_FAILED, exc)

    def waiter(self, topic: str) -> Waiter:
        """A subscription that wakes when ``topic`` gets new ready work (one per topic)."""
        check_topic_name(topic)
        with self._waiters_lock:
            if topic not in self._waiters:
                self._waiters[topic] = Waiter(self.redis, topic)
            return self._waiters[topic]

    def ready_watch(self, topic: str, group: str = DEFAULT_GROUP) -> ReadyWatch:
        """What a batch consumer reads while its batch fills: ``look`` says what the group
        could claim now, ``wait`` sleeps until that may have changed (client/ready_watch.py).
        Close it when done."""
        check_topic_name(topic)
        check_group_name(group)
        return ReadyWatch(self, topic, group)

    def ack(self, messages: Message | Sequence[Message]) -> int:
        """Acknowledge: the messages are done and removed. Returns how many still held their
        lease (a late ack, after the lease expired, changes nothing: it is redelivered)."""
        return self._run(self._ack(messages))

    def nack(self, message: Message, error: str | BaseException = "failed") -> str | None:
        """The delivery failed: retried after the backoff, or dead-lettered once delivered
        1 + max_retries times. Returns "retried", "dead", or None if the lease was gone."""
        return self._run(self._nack(message, error))

    def release(self, messages: Sequence[Message]) -> int:
        """Give back deliveries not yet started, at their old place, without counting an
        attempt. Returns how many were given back."""
        return self._run(self._release(messages))

    def extend(self, messages: Message | Sequence[Message], seconds: float) -> list[bool]:
        """Extend leases to ``seconds`` from now; per message, False if its lease was lost."""
        return self._run(self._extend(messages, seconds))

    def recover(self, topic: str | None = None) -> int:
        """Return expired leases to pending now (of ``topic``, or of every topic), counting
        the attempt. Returns how many deliveries were recovered. Over every topic, a topic
        whose registry entry is broken is logged (a warning naming it and what is wrong)
        and skipped; the others are recovered."""
        return self._run(self._recover(topic))

    def dead_letters(self, topic: str, group: str = DEFAULT_GROUP) -> list[DeadLetter]:
        """The group's dead letters, oldest first."""
        return self._run(self._dead_letters(topic, group))

    def requeue_dead(self, topic: str, group: str = DEFAULT_GROUP,
                     ids: Iterable[str] | None = None) -> int:
        """Put dead letters (``ids``, or all) back to ready with attempts reset; returns how
        many were requeued. An id that names no dead letter of the group is ignored: one
        requeued or purged since, or one listed before the topic was deleted and created
        again (the id carries the topic's generation). InvalidMessage for an id that is
        no dead-letter id or names a slot the topic lacks."""
        return self._run(self._requeue_dead(topic, group, ids))

    def cancel(self, topic: str, message_id: str, group: str | None = None) -> Cancelled:
        """Cancel the message ``message_id`` (``SendResult.message_id``) in ``group``, or in
        every group (SPEC §14): where it is pending it is removed; a running delivery of it
        is told to stop as a supersede tells it (``message.superseded``), and however it
        ends it is dropped, not retried. Both counted ``cancelled``, and traced. Returns
        how many pending messages were removed and running deliveries told;
        UnknownMessage when none is pending or running. Finding it reads every slot of the
        groups (docs/semantics.md, "Supersede and cancel")."""
        return self._run(self._cancel(topic, message_id, group))

    def purge_dead(self, topic: str, group: str = DEFAULT_GROUP) -> int:
        """Delete the group's dead letters; returns how many."""
        return self._run(self._purge_dead(topic, group))

    # -- worker runtime -------------------------------------------------------------------

    def handler(self, topic: str, **options: Any) -> Callable[[Handler], Handler]:
        """Decorator: ``@client.handler("topic", group=..., concurrency=...)`` makes the
        function a consumer of ``topic`` (its ``consumer`` attribute); ``client.run()`` runs
        every decorated consumer. The function itself is returned unchanged."""

        def decorate(function: Handler) -> Handler:
            consumer = Consumer(self, topic, function, **options)
            # The documented attribute on the user's function, which its type cannot declare.
            function.consumer = consumer  # type: ignore[attr-defined]
            self._decorated.append(consumer)
            return function

        return decorate

    def run(self) -> None:
        """Run every ``@handler`` consumer and ``@checker`` check-back until SIGINT/SIGTERM,
        then shut down gracefully."""
        run_all([*self._decorated, *self._check_backs])
