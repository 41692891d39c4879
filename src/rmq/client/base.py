"""The client core: every decision of the queue's API that is not I/O, written once for
``Client`` and ``AsyncClient`` (as httpx's ``BaseClient`` serves both of its clients).

Each public method is a *flow*: a generator that checks the arguments, consults the registry
cache, calls the storage's sans-IO operations (``storage/calls.py``) and yields what it needs
done, one effect at a time:

- ``list[Call]``: one round trip to Redis (what the storage operations yield);
- :class:`Load`: the topic's registry entry, loaded once for all callers that find their
  cached copy stale at the same moment;
- :class:`Subscribe` and :class:`Sleep`: waiting on the topic's wake-up channel.

The sync and async clients differ only in how they perform these effects (their ``_run``).

The features beside the queue's hot paths are mixins of flows (``registry_flows.py``,
``views.py``; ``transactions.py`` through each client's methods), each subclassing what it
needs of this class (``host.ClientHost``). The fleet limits are one concern,
``limited.FleetLimits``, whose hooks the claims and settles call.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from operator import attrgetter
from typing import Any, TypeVar

from .. import otel
from ..errors import AccessDenied, InvalidArgument, RedisUnavailable, UnknownTopic
from ..message import Claimed, Message, MessageIds, SendCounts, SendResult, message_id_of, stop_key
from ..settings import check_group_name, check_topic_name
from ..stops import BOARD
from ..storage import queue, registry, settle
from ..storage.calls import Op
from ..storage.codec import merge_identity
from ..storage.isolation import TOPIC_PROBLEMS, PerTopic, load_all, problem_of
from ..storage.links import store_links, take_links, with_links
from ..storage.queue import TopicGone
from ..storage.registry import TopicInfo
from ..storage.trace import trace_argument
from .arguments import (
    check_consumer_id,
    check_count,
    check_error,
    check_flag,
    check_lease,
    check_message,
    check_messages,
    check_wait,
)
from .clock import Clock, ServerClock, check_epoch
from .effects import Flow, Load, Sleep, Subscribe
from .limited import FleetLimits
from .outgoing import MISSING, prepare, prepare_batch
from .registry_flows import RegistryFlows
from .views import ViewFlows

__all__ = ["BaseClient", "Flow", "Load", "Subscribe", "Sleep", "MISSING"]


def _settled(messages: Sequence[Message]) -> None:
    """Settled deliveries' stop signals are forgotten (rmq/stops.py): nothing to do when
    this process asked about none."""
    if BOARD:
        BOARD.settled(stop_key(m) for m in messages)


def _identity_of(message: queue.Outgoing) -> bytes:
    """What a message's id hashes on a topic merging by key."""
    return merge_identity(message.member)


T = TypeVar("T")
log = logging.getLogger("rmq.client")


class BaseClient(RegistryFlows, ViewFlows):
    """What both clients share: the clock, the registry cache, and one flow per method.
    The fleet limits are a concern of their own (``_fleet``), whose hooks the flows of
    claims and settles call.

    ``clock``: None (the default) judges time by the Redis server's clock
    (:class:`~rmq.client.clock.ServerClock`); a ``ServerClock`` of one's own sets its local
    base; any other callable returning epoch ms is trusted as it is (tests control time so).
    """

    is_cluster: bool = False

    def __init__(self, *, clock: Clock | None, registry_ttl: float):
        if clock is not None and not callable(clock):
            raise InvalidArgument(f"clock must be a callable returning epoch milliseconds, "
                                  f"or None for the server's clock, got {clock!r}")
        if isinstance(registry_ttl, bool) or not isinstance(registry_ttl, int | float) or not (
                0 <= registry_ttl <= 3600):
            raise InvalidArgument(f"registry_ttl must be a number of seconds from 0 to 3600, "
                                  f"got {registry_ttl!r}")
        self.clock: Clock = ServerClock() if clock is None else clock
        self._server_clock = self.clock if isinstance(self.clock, ServerClock) else None
        self.registry_ttl = registry_ttl
        self._cache: dict[str, tuple[float, TopicInfo]] = {}
        self._claimer = queue.Claimer(single_node=True)
        self._fleet = FleetLimits(self)

    def _connected(self, is_cluster: bool) -> None:
        """The client knows what it talks to: a single node, or a cluster."""
        self.is_cluster = is_cluster
        self._claimer = queue.Claimer(single_node=not is_cluster)

    def now(self) -> int:
        """The time by which this client judges due times and leases, in epoch ms: the Redis
        server's (unless the client was given a clock), whatever this host's clock says."""
        return self.clock()

    def _now(self) -> Flow[int]:
        """``now()`` for a flow: measures the server's clock first when that is due."""
        server = self._server_clock
        if server is None:
            return check_epoch(self.clock(), "the client's clock")
        now = server.read()
        if now is None:  # never measured, stale, or invalidated (the server's is checked)
            yield from server.measure()
            now = server()
        return now

    def _failed(self, error: Exception) -> None:
        """A round trip failed: after reconnecting, the client may reach another server,
        whose clock is measured anew."""
        if self._server_clock is not None and isinstance(error, RedisUnavailable):
            self._server_clock.invalidate()

    # -- the registry cache -----------------------------------------------------------

    def _cached(self, name: str) -> TopicInfo | None:
        entry = self._cache.get(name)
        return entry[1] if entry is not None and entry[0] > time.monotonic() else None

    def _drop_cached(self, name: str) -> None:
        self._cache.pop(name, None)

    def _topic(self, name: str, fresh: bool = False) -> Flow[TopicInfo]:
        # A name found in the cache was checked when it was loaded: a send pays one lookup.
        cached = self._cached(name) if type(name) is str and fresh is False else None
        if cached is not None:
            return cached
        check_topic_name(name)
        check_flag(fresh, "fresh")
        info: TopicInfo = yield Load(name, fresh)
        return info

    def _load(self, name: str) -> Op[TopicInfo]:
        """What a :class:`Load` runs: read the entry and cache it for ``registry_ttl``."""
        expires = time.monotonic() + self.registry_ttl
        info = yield from registry.load_info(name)
        self._cache[name] = (expires, info)
        return info

    def _on_current(self, name: str, act: Callable[[TopicInfo, bool], Flow[T]]) -> Flow[T]:
        """``act(info, first)`` on the topic's entry, cached or loaded. When the scripts
        refuse it because the topic was deleted, or deleted and created again, since that
        entry was read (storage.queue.TopicGone), the entry is loaded afresh and ``act``
        runs once more (``first`` False): a deleted topic raises UnknownTopic, a re-created
        one is used as it is now, never the old one's keys."""
        info = yield from self._topic(name)
        try:
            return (yield from act(info, True))
        except TopicGone:
            info = yield from self._reload_gone(name)
        try:
            return (yield from act(info, False))
        except TopicGone:
            raise UnknownTopic(name) from None  # deleted and created again meanwhile, twice

    def _reload_gone(self, name: str) -> Flow[TopicInfo]:
        """The entry after the scripts refused the cached one (see ``_on_current``)."""
        self._drop_cached(name)
        return (yield from self._topic(name, fresh=True))

    def _changing(self, name: str, op: Op[T]) -> Flow[T]:
        """A registry change: this client's cached entry is stale after it, whatever happens."""
        try:
            return (yield from op)
        finally:
            self._drop_cached(name)

    # -- registry -----------------------------------------------------------------------

    def _topics(self) -> Flow[list[str]]:
        return (yield from registry.list_topics())

    def _topic_entries(self) -> Flow[PerTopic[TopicInfo]]:
        """Every topic's entry, read afresh (and cached): the readable and the broken ones."""
        expires = time.monotonic() + self.registry_ttl
        entries = yield from load_all()
        for name, info in entries.results.items():
            self._cache[name] = (expires, info)
        return entries

    def _wake(self, topic: str) -> Flow[None]:
        check_topic_name(topic)
        yield from queue.wake(topic)

    # -- sending ------------------------------------------------------------------------

    def _send(self, topic: str, body: Any, options: tuple[Any, ...],
              link: str | None = None) -> Flow[SendResult]:
        """``options``: prepare()'s, by position. Single sends are the hottest path: here
        ``_on_current`` is written out, and a cached entry and a fresh clock are taken
        without entering ``_topic`` or ``_now`` (a closure or a generator more per send
        cost a tenth of its time in the client). ``link``: the producer span's context,
        kept beside the message in the same round trip (storage/links.py)."""
        info = self._cached(topic) if type(topic) is str else None
        if info is None:
            info = yield from self._topic(topic)
        server = self._server_clock
        for first in (True, False):
            now = server.read() if server is not None else None
            if now is None:
                now = yield from self._now()
            message = prepare(info.settings, now, body, *options)
            try:
                # the call may join others sent at once (group_commit.py)
                by_key = info.settings.merge == "key"
                call = queue.enqueue_one(topic, info.generation, info.groups, message, now,
                                         self._heads(info), info.filter_argument,
                                         trace_argument(topic, info.settings), by_key,
                                         info.stop_argument, info.version_retention_ms)
                if link is None:
                    (reply,) = yield [call]
                else:
                    reply = (yield [call, *store_links(topic, info.groups, [message], link,
                                                       by_key)])[0]
                outcome = queue.outcome_one(topic, reply)
            except TopicGone:
                if not first:
                    raise UnknownTopic(topic) from None
                info = yield from self._reload_gone(topic)
                continue
            return SendResult(message.slot, outcome == queue.MERGED, message_id_of(
                topic, merge_identity(message.member) if by_key else message.member),
                outcome == queue.OUTDATED)
        raise AssertionError("unreachable: the second attempt returns or raises")

    def _send_many(self, topic: str, items: Iterable[Any],
                   link: str | None = None) -> Flow[SendCounts]:
        if isinstance(items, Iterator):  # one-shot: kept for a second attempt
            items = list(items)

        def send_many(info: TopicInfo, first: bool) -> Flow[SendCounts]:
            now = yield from self._now()
            batch = prepare_batch(info.settings, now, items)
            by_key = info.settings.merge == "key"
            outcomes = yield from with_links(queue.send(
                topic, info.generation, info.groups, batch, now, self._heads(info),
                info.filter_argument, trace_argument(topic, info.settings), by_key,
                info.stop_argument, info.version_retention_ms),
                topic, info.groups, batch, link, by_key)
            return SendCounts(len(batch), outcomes.count(queue.MERGED), MessageIds(
                topic, batch, _identity_of if by_key else attrgetter("member")),
                outcomes.count(queue.OUTDATED))

        return (yield from self._on_current(topic, send_many))

    # -- consuming ----------------------------------------------------------------------

    def _claim(self, topic: str, group: str, count: int, lease: float | None,
               wait: float | None, ack: Message | Sequence[Message],
               holder: str | None = None) -> Flow[list[Message]]:
        if wait is not None:
            check_wait(wait)
        deadline = None if wait is None else time.monotonic() + wait
        subscribed = False
        while True:
            messages, next_due = yield from self._claim_due(topic, group, count, lease, ack,
                                                            holder)
            ack = ()
            if messages or deadline is None:
                return messages
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return messages
            if self._fleet.held_back(topic, group):  # by the group's limits: wait for capacity
                yield from self._fleet.wait_for_capacity(topic, group, remaining)
                continue
            if not subscribed:
                # Subscribe, then claim again: a send between the two is not missed.
                yield Subscribe(topic)
                subscribed = True
                continue
            if next_due is not None:
                remaining = min(remaining, max(0.0, (next_due - self.now()) / 1000))
            yield Sleep(topic, remaining)

    def _claim_due(self, topic: str, group: str, count: int, lease: float | None,
                   ack: Message | Sequence[Message], holder: str | None = None
                   ) -> Flow[Claimed]:
        check_topic_name(topic)
        check_group_name(group)
        check_count(count)
        if lease is not None:
            check_lease(lease)
        claimer = "" if holder is None else check_consumer_id(holder, "holder")
        acks = check_messages(ack, "ack")
        fleet = self._fleet

        def claim_due(info: TopicInfo, first: bool) -> Flow[Claimed]:
            acking = acks if first else ()  # the first attempt's round trip acked them
            if info.paused:
                yield from self._ack(acking)
                return Claimed([], None)
            holding = (yield from fleet.holding(acking)) if acking else ()
            now = yield from self._now()
            lease_s = lease or info.settings.visibility_timeout
            limit = fleet.claim_limit(claimer, info.limits(group))
            supersede = bool(info.supersede) and info.supersede_limit(group) is not None
            claim = self._claimer.claim(topic, info.generation, group, info.settings, count,
                                        now, lease_s, claimer, limit, supersede)
            try:
                # (a claim that acks nothing is the claim alone: no wrapper to go through)
                claimed = yield from (fleet.with_acks(acking, holding, now, claim) if acking
                                      else claim)
            except AccessDenied as denied:  # perhaps the limits' keys alone: see refused()
                unlimited = self._claimer.claim(topic, info.generation, group, info.settings,
                                                count, now, lease_s, claimer,
                                                supersede=supersede)
                claimed = yield from fleet.refused(denied, limit, info.limits(group), unlimited)
            return fleet.claimed(info, group, count, claimed)

        claimed = yield from self._on_current(topic, claim_due)
        _settled(acks)
        if claimed.messages and otel.tracer() is not None:
            yield from take_links(claimed.messages)
        return claimed

    def _heads(self, info: TopicInfo) -> bool:
        """Whether the topic keeps a heads index here (single node, many slots)."""
        return queue.keeps_heads(info.settings, not self.is_cluster)

    def _ack(self, messages: Message | Sequence[Message]) -> Flow[int]:
        batch = check_messages(messages)
        if not batch:
            return 0
        holding = yield from self._fleet.holding(batch)
        acked = yield from self._fleet.ack(batch, holding)
        _settled(batch)
        return acked

    def _nack(self, message: Message, error: str | BaseException) -> Flow[str | None]:
        check_message(message)
        text = check_error(error)
        try:
            info = yield from self._topic(message.topic)
            if message.generation and info.generation != message.generation:
                # a cache older than the delivery's topic has the wrong retry settings; a
                # delivery older than the topic settles nothing (fail.lua checks)
                info = yield from self._topic(message.topic, fresh=True)
        except UnknownTopic:  # deleted: its deliveries went with it, nothing to fail
            return None
        now = yield from self._now()
        fail = settle.fail(message, text, info.settings, now, not self.is_cluster)
        outcome = yield from self._fleet.nack(message, info, now, fail)
        _settled([message])
        return outcome

    def _release(self, messages: Sequence[Message]) -> Flow[int]:
        messages = check_messages(messages)
        if not messages:
            return 0
        heads, by_key = [], []
        for name in dict.fromkeys(m.topic for m in messages):
            try:
                info = yield from self._topic(name)
            except UnknownTopic:  # deleted: its deliveries went with it, nothing to give back
                continue
            if self._heads(info):
                heads.append(name)
            if info.settings.merge == "key":
                by_key.append(name)
        holding = yield from self._fleet.holding(messages)
        now = yield from self._now()
        released = yield from self._fleet.release(holding, now,
                                                  settle.release(messages, now, heads, by_key))
        _settled(messages)
        return released

    def _extend(self, messages: Message | Sequence[Message], seconds: float) -> Flow[list[bool]]:
        batch = check_messages(messages)
        check_lease(seconds, "seconds")
        if not batch:
            return []
        holding = yield from self._fleet.holding(batch)
        now = yield from self._now()
        return (yield from self._fleet.extend(batch, holding, now, now + int(seconds * 1000)))

    def _recover(self, topic: str | None) -> Flow[int]:
        if topic is not None:
            return (yield from self._on_current(check_topic_name(topic), self._recover_topic))
        entries = yield from self._topic_entries()
        total = 0
        for info in entries.results.values():
            try:
                total += yield from self._on_current(info.name, self._recover_topic)
            except UnknownTopic:  # deleted meanwhile: nothing left to recover
                continue
            except TOPIC_PROBLEMS as exc:
                entries.broken[info.name] = problem_of(exc)
        for name, problem in entries.broken.items():
            log.warning("recover() skips topic %r: %s", name, problem)
        return total

    def _recover_topic(self, info: TopicInfo, first: bool) -> Flow[int]:
        now = yield from self._now()
        retried, dead_ = yield from settle.recover(
            info.name, info.generation, registry.groups_with_data(info), info.settings, now,
            not self.is_cluster)
        return retried + dead_
