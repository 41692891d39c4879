"""Replicated writes: a write returns only once N replicas hold it (SPEC §7), without I/O.

``Client(url, replicas=N, replica_timeout=seconds, replica_fsync=False)`` builds one
:class:`Replication`. The executors ask it, for each batch they send, which calls to append
(:meth:`Replication.waits`: ``WAIT N ms``, or ``WAITAOF 1 N ms`` with ``replica_fsync``) and
hand it those calls' replies (:meth:`Replication.shortfall`): a write fewer replicas hold than
asked is :class:`~rmq.errors.NotReplicated`. ``WAIT`` counts the replicas that acknowledged
every write this connection made before it, so it travels on the same connection right after
the batch's calls: appended to the single node's pipeline, or to each master's on a cluster.

Which calls write is derived from the calls themselves, never listed per operation:

- a script writes unless its flags say ``no-writes`` or it declares itself housekeeping
  (``--- @housekeeping``, ``storage/scripts.py``: a promotion, a history bucket,
  both redone if lost): so reading sizes (``stats``) sends no ``WAIT``;
- a plain command writes unless it is one of :data:`STORES_NOTHING` (the reads the
  operations send, and ``PUBLISH``, which stores nothing). A command missing from that set
  is waited for: forgetting one costs a round trip, never a lost write.

Two kinds of writes are soft state, which a failover may lose without breaking a promise
(docs/reliability.md, "Replicated writes"), and are named by what they write:

- *renewed* writes send no ``WAIT``: a lease extension (``extend.lua``, and on a cluster
  the permits' deadlines moved ahead of it, ``limit_extend.lua``) and a consumer's record in
  the registry (its heartbeat, its removal): the next extension or heartbeat, due long
  before the loss could matter, writes them again. A worker then starts and keeps its
  leases while a replica stalls;
- a *claim*'s writes (``claim.lua``, ``claim_heads.lua``, and the rounds of a claim: its
  heads index rebuild, its limits' reservation and settlement) are waited for, so that a
  claim the primary's death would lose is rare (a lost claim's delivery ids may be given
  again, to other messages, by the promoted replica), but a shortfall is no error: the
  claim hands over what it took, as the ack is what must not be lost. Raising instead
  would leave those messages in flight with nobody holding them, to come back when their
  leases run out, each having cost an attempt (dead-lettered unseen at ``max_retries=0``).

So :class:`BatchNotReplicated` is raised for a batch that holds another write (a send, an
ack, a nack, a registry change...) which fewer replicas acknowledged than asked.

``replicas=0`` without ``replica_fsync`` appends nothing: the default costs nothing.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from redis.exceptions import ResponseError

from ..errors import InvalidArgument, NotReplicated
from ..message import Claimed, Message
from ..storage.calls import Call, Op, command
from ..storage.keys import RegistryKeys, topic_of

__all__ = ["Replication", "PRIMARY_ONLY", "BatchNotReplicated", "STORES_NOTHING", "stores",
           "must_replicate", "describe", "claimed_in", "GIVE_BACK_FAILED"]

# The plain commands the operations send that store nothing: a batch of only these (and of
# scripts that store nothing) is not waited for. The waits are among them: the probe
# ``WAITAOF 0 0 0`` at connect must not itself wait for replicas that may be down.
STORES_NOTHING = frozenset({
    "GET", "HGET", "HGETALL", "HKEYS", "HLEN", "HMGET", "SISMEMBER", "SMEMBERS", "ZCARD",
    "ZRANGE", "ZSCORE", "EXISTS", "SCAN", "TYPE", "TIME", "PUBLISH", "PING", "INFO",
    "CLUSTER", "COMMAND", "WAIT", "WAITAOF",
})

# Soft state (module doc): scripts whose writes the next of their kind renews, sent with no
# WAIT; scripts of a claim, waited for but not failed by a shortfall.
_RENEWED_SCRIPTS = frozenset({"extend", "limit_extend"})
_CLAIM_SCRIPTS = frozenset({"claim", "claim_heads", "sync_heads", "limit_reserve",
                            "limit_settle"})

# What a user calls the change each script makes, for NotReplicated's message.
_OPERATIONS = {
    "enqueue": "send", "ack": "ack", "fail": "nack", "release": "release",
    "extend": "lease extension", "recover": "lease recovery", "claim": "claim",
    "claim_heads": "claim", "sync_heads": "heads index rebuild",
    "requeue_dead": "dead-letter requeue",
}


class BatchNotReplicated(NotReplicated):
    """:class:`NotReplicated` as an executor raises it: with the batch's ``replies``, so that
    the client hands them to the operation, lets it finish its remaining round trips and
    raises this at its end. An operation of several round trips (a topic's creation, a
    claim that first rebuilds its index) is then never left half done on the primary.
    ``value``: what the operation returned once it finished (set by the client as it
    raises), so that ``claim(ack=...)`` can give back what it claimed (:func:`claimed_in`)."""

    replies: list[Any]
    value: Any = None


def stores(call: Call) -> bool:
    """Whether ``call`` may store something a failover could lose and that is not renewed
    soon after (module doc): whether a ``WAIT`` follows it."""
    if call.script is not None:
        return ("no-writes" not in call.script.flags and not call.script.housekeeping
                and call.script.name not in _RENEWED_SCRIPTS)
    name = call.args[0]
    text = name.decode() if isinstance(name, bytes) else str(name)
    return text.upper() not in STORES_NOTHING and not _renewed(call.args)


def must_replicate(call: Call) -> bool:
    """Whether fewer replicas than asked holding ``call`` is an error: it stores, and is not
    part of a claim (module doc)."""
    return stores(call) and (call.script is None or call.script.name not in _CLAIM_SCRIPTS)


def _renewed(args: tuple[Any, ...]) -> bool:
    """A plain command whose write the next heartbeat renews: any write to a topic's
    consumers hash. (Permits move with their leases inside extend.lua and
    limit_extend.lua.)"""
    key = args[1] if len(args) > 1 else ""
    text = key.decode(errors="replace") if isinstance(key, bytes) else str(key)
    topic = topic_of(text)
    return topic is not None and text == RegistryKeys(topic).consumers


def describe(calls: Sequence[Call]) -> str:
    """The writes among ``calls`` that must be replicated, in a user's words: ``the send to
    'renders'``."""
    written = [call for call in calls if must_replicate(call)]
    kinds = Counter(_OPERATIONS.get(call.script.name, call.script.name)
                    if call.script is not None else "registry write" for call in written)
    topics = sorted({topic for call in written
                     for topic in [topic_of(call.keys[0] if call.keys else
                                            call.args[1] if len(call.args) > 1 else "")]
                     if topic is not None})
    what = " and ".join(kinds) or "write"
    where = f" to {', '.join(repr(t) for t in topics)}" if topics else ""
    return f"the {what}{where}"


@dataclass(frozen=True, slots=True)
class Replication:
    """What a client asks of every write: ``replicas`` replicas hold it (in memory, or in
    their append-only file with ``fsync``, then the primary's file too) within ``timeout``
    seconds. Build it with :meth:`of`, which checks the arguments."""

    replicas: int = 0
    timeout: float = 1.0
    fsync: bool = False

    @classmethod
    def of(cls, replicas: Any = 0, replica_timeout: Any = 1.0, replica_fsync: Any = False,
           socket_timeout: Any = None) -> Replication:
        """The policy for these client arguments; :class:`InvalidArgument` naming the one
        that is wrong. ``socket_timeout`` (redis-py's, 30 s unless given) bounds the
        timeout: a ``WAIT`` longer than it would read as a dead connection."""
        if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 0:
            raise InvalidArgument(f"replicas must be an integer >= 0 (0: the primary alone "
                                  f"acknowledges), got {replicas!r}")
        if not isinstance(replica_fsync, bool):
            raise InvalidArgument(f"replica_fsync must be True or False, got {replica_fsync!r}")
        limit = float(socket_timeout) if isinstance(socket_timeout, int | float) else 30.0
        if (isinstance(replica_timeout, bool) or not isinstance(replica_timeout, int | float)
                or not math.isfinite(replica_timeout) or replica_timeout <= 0
                or replica_timeout >= limit):
            raise InvalidArgument(f"replica_timeout must be a number of seconds above 0 and "
                                  f"below the socket timeout ({limit:g} s), got "
                                  f"{replica_timeout!r}")
        if replica_timeout * 1000 < 1:
            raise InvalidArgument(f"replica_timeout must be at least 0.001 s (WAIT counts "
                                  f"milliseconds), got {replica_timeout!r}")
        return cls(replicas, float(replica_timeout), replica_fsync)

    @property
    def active(self) -> bool:
        """Whether writes wait at all (False: nothing is appended to any batch)."""
        return self.replicas > 0 or self.fsync

    def waits(self, batch: Sequence[Call]) -> list[Call]:
        """The calls to send right after ``batch`` on its connection: none when nothing is
        asked or nothing in it stores."""
        if not self.active or not any(stores(call) for call in batch):
            return []
        milliseconds = max(1, round(self.timeout * 1000))
        if self.fsync:
            return [command("WAITAOF", 1, self.replicas, milliseconds)]
        return [command("WAIT", self.replicas, milliseconds)]

    def shortfall(self, batch: Sequence[Call], replies: Sequence[Any],
                  results: Sequence[Any] = ()) -> BaseException | None:
        """The error to raise for ``batch`` given the replies of its :meth:`waits` (fewer
        replies: the connection was lost before they came): :class:`BatchNotReplicated`
        carrying ``results`` (the batch's own replies) when fewer replicas acknowledged
        than asked, the reply itself when it is an error, else None (also when every write
        of ``batch`` is a claim's: module doc)."""
        if not any(must_replicate(call) for call in batch):
            return None
        if not replies:
            return _carrying(results, BatchNotReplicated(
                f"{describe(batch)} reached the primary, but the connection was lost before "
                "its replicas acknowledged it: it may be lost if the primary fails now",
                acknowledged=0, wanted=self.replicas, local_fsync=False if self.fsync else None))
        reply = replies[0]
        if isinstance(reply, BaseException):
            return reply
        local: bool | None = None
        if self.fsync:
            local, acknowledged = bool(int(reply[0])), int(reply[1])
        else:
            acknowledged = int(reply)
        if acknowledged >= self.replicas and local is not False:
            return None
        seconds = f"{self.timeout:g} s"
        if self.fsync:
            disk = "on its disk" if local else "but not yet on its disk"
            message = (f"{describe(batch)} is stored on the primary ({disk}) and only "
                       f"{acknowledged} of {self.replicas} replicas had it on disk within "
                       f"{seconds}: it may be lost if the primary fails now")
        else:
            message = (f"{describe(batch)} is stored on the primary but only {acknowledged} "
                       f"of {self.replicas} replicas acknowledged within {seconds}: it may be "
                       "lost if the primary fails now")
        return _carrying(results, BatchNotReplicated(
            message, acknowledged=acknowledged, wanted=self.replicas, local_fsync=local))

    def check_server(self) -> Op[None]:
        """Before the first write: with ``fsync``, :class:`InvalidArgument` if the server
        lacks ``WAITAOF`` (before Redis 7.2), rather than an unknown command at every write.
        ``WAITAOF 0 0 0`` asks for nothing, so it answers at once where it exists."""
        if not self.fsync:
            return
        try:
            yield [command("WAITAOF", 0, 0, 0)]
        except ResponseError as error:
            if "unknown command" not in str(error).lower():
                raise
            raise InvalidArgument("replica_fsync=True needs WAITAOF, which this Redis lacks "
                                  "(it came with Redis 7.2): upgrade, or wait for replicas' "
                                  "memory only (replica_fsync=False)") from None


GIVE_BACK_FAILED = ("could not give back the messages claimed with an ack that no replica "
                    "confirmed; they return when their leases run out")


def claimed_in(error: BatchNotReplicated) -> list[Message]:
    """The messages a ``claim`` or ``claim_due`` whose ack fell short of replicas claimed in
    the same round trip: the caller never receives them, so the client gives them back
    (no attempt counted) rather than leave them in flight, held by nobody, until their
    leases run out and count an attempt each."""
    value = error.value
    if isinstance(value, Claimed):
        return value.messages
    if isinstance(value, list):
        return [m for m in value if isinstance(m, Message)]
    return []


def _carrying(results: Sequence[Any], error: BatchNotReplicated) -> BatchNotReplicated:
    error.replies = list(results)
    return error


PRIMARY_ONLY = Replication()  # the default: a write returns once the primary holds it
