"""The Redis key layout: the one module that formats a key.

Every key of one slot carries the hash tag ``{topic:slot}``, so a slot lives on one node of a
Redis Cluster and the scripts that touch it stay single-slot. Registry keys carry the tag
``{topic}`` and are only touched by plain commands. ``docs/storage.md`` describes each key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

__all__ = [
    "PREFIX",
    "TOPICS",
    "SlotKeys",
    "GroupSlotKeys",
    "RegistryKeys",
    "HeadsKeys",
    "LimitKeys",
    "TxSlotKeys",
    "TxTopicKeys",
    "wake_channel",
    "topic_of",
]

PREFIX = "rmq"
TOPICS = f"{PREFIX}:topics"  # set of every registered topic name


def wake_channel(topic: str) -> str:
    """Pub/sub channel that announces new ready work (or an earlier due time) in ``topic``."""
    return f"{PREFIX}:wake:{topic}"


def stop_channel(topic: str) -> str:
    """Pub/sub channel that tells consumers of ``topic`` which deliveries to stop (a newer
    message superseded them, or they were cancelled: lua/includes/running.lua)."""
    return f"{PREFIX}:stop:{topic}"


def topic_of(key: str | bytes) -> str | None:
    """The topic a key of this layout belongs to (its hash tag's topic), or None for a key of
    no topic (``TOPICS``): what an error names when it can only see keys."""
    text = key.decode(errors="replace") if isinstance(key, bytes) else key
    opened, closed = text.find("{"), text.find("}")
    if not text.startswith(f"{PREFIX}:") or opened < 0 or closed < opened:
        return None
    return text[opened + 1 : closed].partition(":")[0]  # {topic} or {topic:slot}


@dataclass(frozen=True, slots=True)
class RegistryKeys:
    """Keys of one topic's registry entry."""

    topic: str

    @property
    def settings(self) -> str:  # string: JSON of the topic's settings
        return f"{PREFIX}:{{{self.topic}}}:settings"

    @property
    def generation(self) -> str:  # string: token of this topic's creation (storage.md)
        return f"{PREFIX}:{{{self.topic}}}:generation"

    @property
    def groups(self) -> str:  # set: bound group names
        return f"{PREFIX}:{{{self.topic}}}:groups"

    @property
    def unbound(self) -> str:  # set: groups unbound since, that may still hold messages
        return f"{PREFIX}:{{{self.topic}}}:unbound"

    @property
    def filters(self) -> str:  # hash: bound group -> JSON of its filters (rmq.filters)
        return f"{PREFIX}:{{{self.topic}}}:filters"

    @property
    def supersede(self) -> str:  # hash: bound group -> its supersede_limit (supersede on)
        return f"{PREFIX}:{{{self.topic}}}:supersede"

    @property
    def paused(self) -> str:  # string "1" while the topic is paused
        return f"{PREFIX}:{{{self.topic}}}:paused"

    @property
    def limits(self) -> str:  # hash: group -> JSON of its GroupLimits (only limited groups)
        return f"{PREFIX}:{{{self.topic}}}:limits"

    @property
    def consumers(self) -> str:  # hash: consumer id -> JSON heartbeat record
        return f"{PREFIX}:{{{self.topic}}}:consumers"

    @property
    def history(self) -> str:  # string: the last history bucket a sampler claimed
        return f"{PREFIX}:{{{self.topic}}}:history"

    def history_ring(self, group: str) -> str:  # string: the group's ring of history samples
        return f"{PREFIX}:{{{self.topic}}}:history:{group}"

    def gather_lead(self, group: str) -> str:  # string: the consumer gathering g's batches
        return f"{PREFIX}:{{{self.topic}}}:gather:{group}"

    def all(self) -> list[str]:
        """The topic's registry keys (rings of history are per group: ``history_ring``)."""
        return [self.settings, self.generation, self.groups, self.unbound, self.filters,
                self.supersede, self.paused, self.limits, self.consumers, self.history]


@dataclass(frozen=True, slots=True)
class LimitKeys:
    """Keys of one group's fleet-wide limits (docs/limits.md), beside the registry entry on
    the topic's tag ``{topic}``: one node holds all of them, on a cluster too."""

    topic: str
    group: str

    def _key(self, kind: str) -> str:
        return f"{PREFIX}:{{{self.topic}}}:limit:{self.group}:{kind}"

    @property
    def limits(self) -> str:  # hash: group -> JSON of its GroupLimits (the registry's)
        return RegistryKeys(self.topic).limits

    @property
    def permits(self) -> str:  # zset: delivery id (or "token:i" placeholder) -> deadline ms
        return self._key("permits")

    @property
    def rate(self) -> str:  # zset: "token:count" -> Redis TIME of a claim, ms
        return self._key("rate")

    @property
    def waiters(self) -> str:  # zset: waiter id -> deadline of its wait, ms
        return self._key("waiters")

    @property
    def wake(self) -> str:  # list: one token per unit of capacity given back to a waiter
        return self._key("wake")

    @property
    def batches(self) -> str:  # hash: a claim's name -> the ids whose permits it holds
        return self._key("batches")

    def all(self) -> list[str]:
        return [self.permits, self.rate, self.waiters, self.wake, self.batches]


@dataclass(frozen=True, slots=True)
class HeadsKeys:
    """A group's heads index on a single node (topics of more than 16 slots): which slots
    hold the best ready and the earliest delayed messages (docs/storage.md)."""

    topic: str
    group: str

    def _key(self, kind: str) -> str:
        return f"{PREFIX}:{{{self.topic}}}:heads:{self.group}:{kind}"

    @property
    def ready(self) -> str:  # zset: slot number -> lowest ready score of the slot (or lower)
        return self._key("ready")

    @property
    def delayed(self) -> str:  # zset: slot number -> earliest delayed due (or earlier), ms
        return self._key("delayed")

    @property
    def synced(self) -> str:  # string: when the index was last built, epoch ms (Redis TIME)
        return self._key("synced")

    def all(self) -> list[str]:
        return [self.ready, self.delayed, self.synced]


@dataclass(frozen=True, slots=True)
class SlotKeys:
    """Keys shared by every group of one slot."""

    topic: str
    slot: int

    @property
    def tag(self) -> str:
        return f"{PREFIX}:{{{self.topic}:{self.slot}}}"

    @property
    def generation(self) -> str:  # string: the topic's generation, checked by every store
        return f"{self.tag}:generation"

    @property
    def clock(self) -> str:  # string: last ready stamp handed out (keeps send order)
        return f"{self.tag}:clock"

    @property
    def seq(self) -> str:  # string: counter of delivery ids
        return f"{self.tag}:seq"

    @property
    def versions(self) -> str:  # hash: identity -> highest version sent (lua/includes/versions)
        return f"{self.tag}:versions"

    @property
    def versions_seen(self) -> str:  # zset: identity -> when a version of it was last sent
        return f"{self.tag}:versions:seen"

    @property
    def trace_log(self) -> str:  # list: the slot's traced events (storage/trace.py)
        return f"{self.tag}:trace:log"

    def earlier_trace(self, groups: Sequence[str]) -> list[str]:
        """The keys earlier versions kept a trace in (the slot's ``trace`` zset, ``trace:tally``
        hash and ``trace:events`` list; each group's ``tally`` hash): deleted with the
        topic."""
        return [f"{self.tag}:trace", f"{self.tag}:trace:tally", f"{self.tag}:trace:events",
                *(f"{self.tag}:{group}:tally" for group in groups)]

    def group(self, group: str) -> GroupSlotKeys:
        return GroupSlotKeys(self.tag, group)


@dataclass(frozen=True, slots=True)
class GroupSlotKeys:
    """Keys of one group in one slot: where its messages live in each state."""

    tag: str
    group: str

    def _key(self, kind: str) -> str:
        return f"{self.tag}:{self.group}:{kind}"

    @property
    def ready(self) -> str:  # zset: member -> ready score (priority, stamp)
        return self._key("ready")

    @property
    def delayed(self) -> str:  # zset: member -> delayed score (due_at, priority)
        return self._key("delayed")

    @property
    def attempts(self) -> str:  # hash: member -> deliveries so far, only for retried messages
        return self._key("attempts")

    @property
    def inflight(self) -> str:  # hash: delivery id -> in-flight record
        return self._key("inflight")

    @property
    def leases(self) -> str:  # zset: delivery id -> lease expiry (epoch ms)
        return self._key("leases")

    @property
    def locks(self) -> str:  # hash: message key -> delivery id holding it (serial topics)
        return self._key("locks")

    @property
    def dead(self) -> str:  # hash: delivery id -> dead-letter record
        return self._key("dead")

    @property
    def dead_index(self) -> str:  # zset: delivery id -> time it died (epoch ms)
        return self._key("deadidx")

    @property
    def counters(self) -> str:  # hash: sent, merged, acked, retried, dead
        return self._key("counters")

    @property
    def values(self) -> str:  # hash: identity -> the message as stored (merge="key" topics)
        return self._key("values")

    @property
    def running(self) -> str:  # hash: deliveries told to stop, and supersede's index
        return self._key("running")  # (lua/includes/running.lua)

    def links(self, message_id: str) -> str:  # list: span contexts of its sends (otel)
        return self._key(f"links:{message_id}")

    def all(self) -> list[str]:
        return [
            self.ready, self.delayed, self.attempts, self.inflight, self.leases,
            self.locks, self.dead, self.dead_index, self.counters, self.values,
            self.running,
        ]


@dataclass(frozen=True, slots=True)
class TxSlotKeys:
    """Transactions in one slot (docs/transactions.md): half messages live in the slot of
    their final home, on its hash tag, so a slot's commit is one single-slot script."""

    topic: str
    slot: int

    @property
    def _tag(self) -> str:
        return SlotKeys(self.topic, self.slot).tag

    @property
    def open(self) -> str:  # zset: transaction id -> time of its last half send here, ms
        return f"{self._tag}:tx:open"

    @property
    def closed(self) -> str:  # zset: transaction id -> closed ms * 2 + 1 committed / 0 not
        return f"{self._tag}:tx:closed"

    @property
    def counts(self) -> str:  # hash: halves (held now), committed, rolled_back
        return f"{self._tag}:tx:counts"

    def halves(self, tx_id: str) -> str:  # list: the transaction's half messages, as runs
        return f"{self._tag}:tx:h:{tx_id}"

    def parts(self, tx_id: str) -> str:  # hash: part -> halves it stored; :opened -> first send, ms
        return f"{self._tag}:tx:p:{tx_id}"

    def of(self, tx_id: str) -> tuple[str, ...]:
        """What a send, commit or rollback of ``tx_id`` touches, in the scripts' order:
        open, closed, halves, parts, counts."""
        tag = self._tag
        return (f"{tag}:tx:open", f"{tag}:tx:closed", f"{tag}:tx:h:{tx_id}",
                f"{tag}:tx:p:{tx_id}", f"{tag}:tx:counts")


@dataclass(frozen=True, slots=True)
class TxTopicKeys:
    """A topic's closed transaction ids and check-back records, on the registry's tag
    ``{topic}``."""

    topic: str

    @property
    def closed(self) -> str:  # zset: closed id -> closed ms * 2 + 1 committed / 0 not
        return f"{PREFIX}:{{{self.topic}}}:tx:closed"

    @property
    def checks(self) -> str:  # hash: transaction id -> "checks,next_ms[,a]" (a: abandoned)
        return f"{PREFIX}:{{{self.topic}}}:tx:checks"

    @property
    def abandoned(self) -> str:  # string: transactions rolled back after max_checks
        return f"{PREFIX}:{{{self.topic}}}:tx:abandoned"

    def all(self) -> list[str]:
        return [self.closed, self.checks, self.abandoned]
