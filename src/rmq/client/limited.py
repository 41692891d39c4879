"""A group's fleet-wide limits in the client's flows (SPEC §10, docs/limits.md): setting and
reading them, what a claim found of them (every claim applies them in Redis:
``storage/limits.py``), the permits freed beside settles, and the wait of a claimer held
back for capacity.

``LimitFlows`` is a part of :class:`~rmq.client.base.BaseClient`, kept apart so that the
limits read as one concept; it relies on the registry cache and clock of the base.
"""

from __future__ import annotations

import itertools
import os
import secrets
from collections.abc import Generator, Sequence
from typing import Any, NamedTuple, TypeVar, cast

from ..errors import UnknownTopic
from ..message import Claimed, Message
from ..settings import GroupLimits, check_group_name, check_topic_name
from ..storage import limits as limit_ops
from ..storage import queue, registry, settle
from ..storage.calls import Op, together
from ..storage.claim import Claim
from ..storage.isolation import TOPIC_PROBLEMS
from ..storage.registry import TopicInfo
from .arguments import check_wait

__all__ = ["AwaitCapacity", "LimitFlows", "CAPACITY_WAIT_MS"]

T = TypeVar("T")
# A flow of the base client (base.Flow, which names this module's effect among its own).
Flow = Generator[Any, Any, T]

# How long a claimer held back by its group's limits stays registered as waiting for a
# token: the longest a consumer sleeps on the wake list before it claims again.
CAPACITY_WAIT_MS = 10_000

# Who waits, for a claim that names no holder: a name unique to the claim, made without a
# random draw per claim (secrets.token_hex cost a system call each), drawn anew in a forked
# child so that two processes never share one.
_unnamed_claims = itertools.count()
_process_name = secrets.token_hex(6)


def _draw_process_name() -> None:
    global _process_name
    _process_name = secrets.token_hex(6)


os.register_at_fork(after_in_child=_draw_process_name)


class AwaitCapacity(NamedTuple):
    """Block on a limited group's wake list (BLPOP) until a token or ``seconds`` pass."""

    key: str
    seconds: float


class LimitFlows:
    """The limits' flows; the base client provides what is declared here."""

    is_cluster: bool
    _claimer: queue.Claimer
    _cache: dict[str, tuple[float, TopicInfo]]
    # per (topic, group) whose last claim here was held back by the group's limits: when
    # more capacity may come with no settle (epoch ms), or None (_wait_for_capacity)
    _held_back: dict[tuple[str, str], int | None]
    # this user may not touch a group's limit keys (a one-topic tenant, whose ACL keeps the
    # registry read-only, docs/reliability.md): it claims an unlimited group without them
    _limit_keys_refused: bool

    def now(self) -> int:
        raise NotImplementedError

    def _cached(self, name: str) -> TopicInfo | None:
        raise NotImplementedError

    def _topic(self, name: str, fresh: bool = False) -> Flow[TopicInfo]:
        raise NotImplementedError

    def _changing(self, name: str, op: Op[T]) -> Flow[T]:
        raise NotImplementedError

    def _set_limits(self, topic: str, group: str, max_in_flight: int | None,
                    rate: tuple[int, float] | None) -> Flow[GroupLimits]:
        limits = GroupLimits(max_in_flight, rate)
        check_group_name(group)
        yield from self._topic(topic)
        yield from self._changing(topic, registry.set_limits(topic, group, limits))
        return limits

    def _limits(self, topic: str, group: str) -> Flow[GroupLimits]:
        check_group_name(group)
        info = yield from self._topic(topic, fresh=True)
        return info.limits(group)


    def _claim_limit(self, claimer: str, cached: GroupLimits) -> limit_ops.ClaimLimit | None:
        """What a claim passes for the group's limits: who waits when held back. Every
        claim reads the limits in Redis (single node: in the claim script; cluster: with
        the first round), so a change applies to the next claim; but for a user refused the
        limit keys, a claim of a group its ``cached`` entry holds unlimited reads none."""
        if self._limit_keys_refused and cached.unlimited:
            return None
        return limit_ops.ClaimLimit(claimer or f"{_process_name}.{next(_unnamed_claims)}",
                                    CAPACITY_WAIT_MS)

    def _judged(self, info: TopicInfo, group: str, count: int, claim: Claim) -> Claimed:
        """A claim's outcome under what it found of the group's limits: held back (granted
        nothing), it records when to wait for capacity (``_wait_for_capacity``); limits
        other than the cached entry's drop the entry, so that settles read them afresh."""
        key, verdict = (info.name, group), claim.verdict
        if verdict is None:  # read no limits: unlimited by the cached entry
            self._held_back.pop(key, None)
            return Claimed(claim.messages, claim.next_due)
        cached = info.limits(group)
        if verdict.limited == cached.unlimited or verdict.permits != (
                cached.max_in_flight is not None):
            self._cache.pop(info.name, None)
        if not claim.messages and verdict.granted == 0:
            self._held_back[key] = verdict.wake_at
        else:
            self._held_back.pop(key, None)
        next_due, wake_at = claim.next_due, verdict.wake_at
        if verdict.granted < count and wake_at is not None:
            next_due = wake_at if next_due is None else min(next_due, wake_at)
        return Claimed(claim.messages, next_due)

    def _limited(self, messages: Sequence[Message]) -> Flow[list[Message]]:
        """Those of ``messages`` whose group has a max_in_flight: they hold permits to free.
        The registry entry comes from the cache. A delivery of an earlier creation of its
        topic holds none (its id may be a delivery's of the topic as it is now)."""
        if not messages:
            return []
        current: dict[tuple[str, str], str | None] = {}  # the limited groups' generation
        for topic, group in _groups_of(messages):
            try:
                # (the cached entry without entering the _topic flow: settles are hot)
                info = self._cached(topic) or (yield from self._topic(topic))
            # Deleted, or its entry unreadable: a settle of it goes on, and its permits
            # expire with its leases.
            except (UnknownTopic, *TOPIC_PROBLEMS):
                info = None
            limited_now = info is not None and info.limits(group).max_in_flight is not None
            current[(topic, group)] = info.generation if info is not None and limited_now \
                else None
        if len(current) == 1:  # (most batches: one group's; every message is looked at once)
            (generation,) = current.values()
            return [] if generation is None else [m for m in messages
                                                  if m.generation == generation]
        return [m for m in messages
                if (generation := current[(m.topic, m.group)]) is not None
                and generation == m.generation]

    def _acking(self, acks: Sequence[Message], limited: Sequence[Message], now: int
                ) -> Op[int]:
        """Acknowledge ``acks``, the ``limited`` ones' permits freed in the same round trip:
        on a single node in the ack's own script call, on a cluster beside it."""
        if not self.is_cluster:
            holding = {(m.topic, m.generation, m.group) for m in limited}
            return (yield from settle.ack(acks, True, now, holding))
        acked, _ = yield from together([settle.ack(acks, False), limit_ops.free(limited, now)])
        return cast(int, acked)

    def _settling(self, acks: Sequence[Message], limited: Sequence[Message], now: int,
                  op: Op[T]) -> Op[T]:
        """``op`` with ``acks`` acknowledged (and the ``limited`` ones' permits freed) in its
        first round trip, ahead of it."""
        if not limited:
            return (yield from settle.with_acks(acks, not self.is_cluster, op))
        _, value = yield from together([self._acking(acks, limited, now), op])
        return cast(T, value)

    def _wait_for_capacity(self, topic: str, group: str, timeout: float) -> Flow[bool]:
        """Sleep while this client's last claim of the group was held back by its limits,
        until a unit of capacity is given back to this waiter or the limit may allow more
        (at most ``timeout`` s). False at once if it was not held back."""
        check_topic_name(topic)
        check_group_name(group)
        timeout = check_wait(timeout, "timeout")
        if (topic, group) not in self._held_back:
            return False
        wake_at = self._held_back.pop((topic, group))
        timeout = min(timeout, CAPACITY_WAIT_MS / 1000)  # as long as it is registered
        if wake_at is not None:
            timeout = min(timeout, max(0.0, (wake_at - self.now()) / 1000))
        if timeout <= 0:
            return True
        yield AwaitCapacity(limit_ops.wake_key(topic, group), timeout)
        return True


def _groups_of(messages: Sequence[Message]) -> set[tuple[str, str]]:
    """The (topic, group)s of ``messages`` (not empty). A batch is most often one claim's,
    whose messages share the claim's topic and group strings: told by identity, which
    costs a settle less than collecting a pair a message."""
    first = messages[0]
    topic, group = first.topic, first.group
    for message in messages:
        if message.group is not group or message.topic is not topic:
            return {(m.topic, m.group) for m in messages}
    return {(topic, group)}
