"""A group's fleet-wide limits in the client (SPEC §10, docs/limits.md), as one concern:
:class:`FleetLimits`, whose hooks the queue's flows call at the same points whatever the
topic (as dramatiq's middleware acts around settling), so that the flows of
:class:`~rmq.client.base.BaseClient` read as the plain queue.

Every claim applies the limits in Redis (``storage/limits.py``); the client passes who
waits when one is held back, judges what the claim found, frees a delivery's permit with its
settle and waits for capacity.
"""

from __future__ import annotations

import enum
import itertools
import os
import secrets
from collections.abc import Sequence
from typing import Any, Final, TypeVar

from ..errors import AccessDenied, UnboundGroup, UnknownTopic
from ..message import Claimed, Message
from ..settings import GroupLimits, check_group_name, check_topic_name
from ..storage import limits as limit_ops
from ..storage import settle
from ..storage.calls import Op, together
from ..storage.claim import Claim
from ..storage.isolation import TOPIC_PROBLEMS
from ..storage.registry import TopicInfo
from .arguments import check_wait
from .effects import AwaitCapacity, Flow
from .host import ClientHost

__all__ = ["FleetLimits", "CAPACITY_WAIT_MS", "KEEP", "Keep"]

T = TypeVar("T")


class Keep(enum.Enum):
    """The default of a limit left out of ``set_limits``: it keeps its stored value (None
    removes it)."""

    KEEP = "KEEP"

    def __repr__(self) -> str:  # what help() shows in set_limits' signature
        return "KEEP"


KEEP: Final = Keep.KEEP

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


class FleetLimits:
    """The fleet limits of one client's groups: setting and reading them, and the hooks the
    queue's flows call.

    Around a claim: ``claim_limit`` (what the claim passes), ``claimed`` (what it found),
    ``refused`` (a user refused only the limits' keys), ``held_back`` and
    ``wait_for_capacity`` (a waiting claim held back). Around a settle: ``holding`` (which
    of its deliveries hold a permit of their group's max_in_flight or max_batches), then
    ``ack``, ``with_acks``, ``nack``, ``release`` or ``extend``, which return the settle's
    operation: the plain one when none holds a permit, adding no layer to it; else one that
    frees or moves the permits with it, on a single node in the settle's own script call,
    on a cluster beside it.
    """

    def __init__(self, client: ClientHost):
        self._client = client
        # per (topic, group) whose last claim here was held back by the group's limits:
        # when more capacity may come with no settle (epoch ms), or None
        self._held_back: dict[tuple[str, str], int | None] = {}
        # this user may not touch a group's limit keys (a one-topic tenant, whose ACL keeps
        # the registry read-only, docs/reliability.md): it claims an unlimited group
        # without them
        self._keys_refused = False

    # -- setting and reading them -----------------------------------------------------

    def set_limits(self, topic: str, group: str, max_in_flight: int | None | Keep,
                   rate: tuple[int, float] | None | Keep,
                   max_batches: int | None | Keep = KEEP) -> Flow[GroupLimits]:
        """The group's limits with those given (``KEEP``: as stored, None: removed), stored
        and returned. A group that is not bound may only lose limits (else UnboundGroup).

        The values are checked here; Redis merges those given into what it holds, in one
        script, so a concurrent change of another limit is kept (``limit_ops.set_limits``).
        A change that changes nothing by the entry read first writes nothing."""
        check_group_name(group)
        info = yield from self._client._topic(topic, fresh=True)
        current = info.limits(group)
        limits = GroupLimits(
            current.max_in_flight if max_in_flight is KEEP else max_in_flight,
            current.rate if rate is KEEP else rate,
            current.max_batches if max_batches is KEEP else max_batches)
        if limits == current:
            return current
        if group not in info.groups and not all(
                given in (KEEP, None) for given in (max_in_flight, rate, max_batches)):
            raise UnboundGroup(topic, group, info.groups)
        changes = {name: getattr(limits, name) for name, given in zip(
            limit_ops.LIMIT_NAMES, (max_in_flight, rate, max_batches), strict=True)
            if given is not KEEP}
        stored = yield from self._client._changing(
            topic, limit_ops.set_limits(topic, group, changes))
        if stored is None:  # unbound since the entry was read
            raise UnboundGroup(topic, group, tuple(g for g in info.groups if g != group))
        return stored

    def limits(self, topic: str, group: str) -> Flow[GroupLimits]:
        check_group_name(group)
        info = yield from self._client._topic(topic, fresh=True)
        return info.limits(group)

    # -- around a claim ---------------------------------------------------------------

    def claim_limit(self, claimer: str, cached: GroupLimits) -> limit_ops.ClaimLimit | None:
        """What a claim passes for the group's limits: who waits when held back. Every
        claim reads the limits in Redis (single node: in the claim script; cluster: with
        the first round), so a change applies to the next claim; but for a user refused the
        limit keys, a claim of a group its ``cached`` entry holds unlimited reads none."""
        if self._keys_refused and cached.unlimited:
            return None
        return limit_ops.ClaimLimit(claimer or f"{_process_name}.{next(_unnamed_claims)}",
                                    CAPACITY_WAIT_MS)

    def claimed(self, info: TopicInfo, group: str, count: int, claim: Claim) -> Claimed:
        """A claim's outcome under what it found of the group's limits: held back (granted
        nothing), it records when to wait for capacity (``wait_for_capacity``); limits
        other than the cached entry's drop the entry, so that settles read them afresh."""
        key, verdict = (info.name, group), claim.verdict
        if verdict is None:  # read no limits: unlimited by the cached entry
            self._held_back.pop(key, None)
            return Claimed(claim.messages, claim.next_due)
        cached = info.limits(group)
        if verdict.limited == cached.unlimited or verdict.permits != cached.holds_permits:
            self._client._drop_cached(info.name)
        if not claim.messages and verdict.granted == 0:
            self._held_back[key] = verdict.wake_at
        else:
            self._held_back.pop(key, None)
        next_due, wake_at = claim.next_due, verdict.wake_at
        if verdict.granted < count and wake_at is not None:
            next_due = wake_at if next_due is None else min(next_due, wake_at)
        return Claimed(claim.messages, next_due)

    def refused(self, denied: AccessDenied, limit: limit_ops.ClaimLimit | None,
                cached: GroupLimits, unlimited: Op[Claim]) -> Op[Claim]:
        """After a claim passing ``limit`` was refused: a group its ``cached`` entry holds
        unlimited is claimed again by ``unlimited`` (the same claim, reading no limits), and
        this user is known to be refused only the limit keys; otherwise ``denied`` stands."""
        if limit is None or not cached.unlimited:
            raise denied
        claim = yield from unlimited
        self._keys_refused = True
        return claim

    def held_back(self, topic: str, group: str) -> bool:
        """Whether this client's last claim of the group was held back by its limits."""
        return (topic, group) in self._held_back

    def wait_for_capacity(self, topic: str, group: str, timeout: float) -> Flow[bool]:
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
            timeout = min(timeout, max(0.0, (wake_at - self._client.now()) / 1000))
        if timeout <= 0:
            return True
        yield AwaitCapacity(limit_ops.wake_key(topic, group), timeout)
        return True

    # -- around a settle --------------------------------------------------------------

    def holding(self, messages: Sequence[Message]) -> Flow[list[Message]]:
        """Those of ``messages`` whose group has a max_in_flight or a max_batches: they hold
        permits to free.
        The registry entry comes from the cache. A delivery of an earlier creation of its
        topic holds none (its id may be a delivery's of the topic as it is now)."""
        if not messages:
            return []
        client = self._client
        current: dict[tuple[str, str], str | None] = {}  # the limited groups' generation
        for topic, group in _groups_of(messages):
            try:
                # (the cached entry without entering the _topic flow: settles are hot)
                info = client._cached(topic) or (yield from client._topic(topic))
            # Deleted, or its entry unreadable: a settle of it goes on, and its permits
            # expire with its leases.
            except (UnknownTopic, *TOPIC_PROBLEMS):
                info = None
            limited_now = info is not None and info.limits(group).holds_permits
            current[(topic, group)] = info.generation if info is not None and limited_now \
                else None
        if len(current) == 1:  # (most batches: one group's; every message is looked at once)
            (generation,) = current.values()
            return [] if generation is None else [m for m in messages
                                                  if m.generation == generation]
        return [m for m in messages
                if (generation := current[(m.topic, m.group)]) is not None
                and generation == m.generation]

    def ack(self, acks: Sequence[Message], holding: Sequence[Message]) -> Flow[int]:
        """The ack of ``acks``, the permits of those ``holding`` them freed with it."""
        if not holding:
            return settle.ack(acks, not self._client.is_cluster)
        return self._ack_at_now(acks, holding)

    def _ack_at_now(self, acks: Sequence[Message], holding: Sequence[Message]) -> Flow[int]:
        now = yield from self._client._now()
        return (yield from self._freeing(acks, holding, now))

    def _freeing(self, acks: Sequence[Message], holding: Sequence[Message], now: int
                 ) -> Op[int]:
        """Acknowledge ``acks``, the ``holding`` ones' permits freed in the same round
        trip: on a single node in the ack's own script call, on a cluster beside it."""
        if not self._client.is_cluster:
            groups = {(m.topic, m.generation, m.group) for m in holding}
            return settle.ack(acks, True, now, groups)
        return _first(together([settle.ack(acks, False), limit_ops.free(holding, now)]))

    def with_acks(self, acks: Sequence[Message], holding: Sequence[Message], now: int,
                  op: Op[T]) -> Op[T]:
        """``op`` with ``acks`` acknowledged (and the ``holding`` ones' permits freed) in
        its first round trip, ahead of it."""
        if not holding:
            return settle.with_acks(acks, not self._client.is_cluster, op)
        return _second(together([self._freeing(acks, holding, now), op]))

    def nack(self, message: Message, info: TopicInfo, now: int,
             fail: Op[str | None]) -> Op[str | None]:
        """``fail`` (the nack of ``message``, whose topic's entry is ``info``), its permit
        freed beside it when its group has a max_in_flight or a max_batches. (Read from
        ``info``, not the
        cache: the nack read it, afresh when the delivery is of another creation.)"""
        if (not info.limits(message.group).holds_permits
                or message.generation != info.generation):  # no permit of the topic now
            return fail
        return _first(together([fail, limit_ops.free([message], now)]))

    def release(self, holding: Sequence[Message], now: int, release: Op[int]) -> Op[int]:
        """``release``, the permits of those ``holding`` them freed beside it."""
        if not holding:
            return release
        return _first(together([release, limit_ops.free(holding, now)]))

    def extend(self, batch: Sequence[Message], holding: Sequence[Message], now: int,
               until: int) -> Op[list[bool]]:
        """The leases of ``batch`` moved to ``until``, and the permits of those ``holding``
        them: on a single node in the same script call (a lease whose permit is gone is not
        extended)."""
        if not self._client.is_cluster or not holding:
            groups = {(m.topic, m.generation, m.group) for m in holding}
            return settle.extend(batch, until, groups)
        return _extend_on_cluster(batch, holding, now, until)


def _extend_on_cluster(batch: Sequence[Message], holding: Sequence[Message], now: int,
                       until: int) -> Op[list[bool]]:
    """A cluster moves the permits first, then only the leases whose permit was held, and
    frees a permit whose lease turned out gone: dying between the round trips can only hold
    units back, never let a lease outlive its permit (docs/limits.md)."""
    permitted = yield from limit_ops.extend(holding, until)
    lost = {id(m) for m, ok in zip(holding, permitted, strict=True) if not ok}
    kept = [m for m in batch if id(m) not in lost]
    extended = dict(zip(map(id, kept), (yield from settle.extend(kept, until)), strict=True))
    gone = [m for m, ok in zip(holding, permitted, strict=True) if ok and not extended[id(m)]]
    if gone:
        yield from limit_ops.free(gone, now)
    return [extended.get(id(m), False) for m in batch]


def _first(op: Op[list[Any]]) -> Op[Any]:
    """The first value of ``together``'s: the settle's, beside the permits freed."""
    values = yield from op
    return values[0]


def _second(op: Op[list[Any]]) -> Op[Any]:
    """The second value of ``together``'s: the operation's, behind the acks."""
    values = yield from op
    return values[1]


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
