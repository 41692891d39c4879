"""A property-based stateful test: random sends, claims, acks, nacks, releases, extensions,
lease expiries with ``recover``, dead-letter requeues, clock steps, the topic deleted and
created again under its name, and transactions (``model_transactions.py``: half sends,
commits, rollbacks, commits cut off midway, check-backs), driven against a real
Redis through the public ``rmq.Client`` and against a small pure-Python model of SPEC §2-3.
After every step the two must agree: what ``claim`` hands out (and in which order), attempts,
due times, leases, dead letters and, when asked, ``stats``.

The model (``Model``) is a reference implementation of the contract, not of the storage:

* pending messages are keyed by (body, key) per group; a send of a pending one merges into
  it, keeping the earliest due time and the highest priority (and its attempt count);
  in-flight messages do not absorb sends; on a topic merging by key (SPEC §14, drawn for
  some examples) pending messages are keyed by identity (key, else body), a send's value
  replaces the pending one and a message put back (retry, release, recovery, requeue)
  gives way to a pending one; a send there may carry a version (SPEC §14 "Newest at
  completion"): one lower than the highest its identity was sent with is dropped (no merge,
  no supersede, counted ``outdated``), an equal or higher one is a send as any;
* ``claim`` takes due messages, highest priority first, then earliest due, then send order
  within a slot; a delivery counts an attempt and holds a lease until acked, nacked,
  released, or recovered after it expired;
* a failure retries after ``min(retry_backoff * 2**(attempts-1), retry_backoff_max)``, or
  dead-letters the message once it has been delivered ``1 + max_retries`` times; a release
  gives the message back at its old place without counting the attempt;
* ``requeue_dead`` puts dead letters back, ready now, attempts reset, merging like a send;
* where the group supersedes (SPEC §14: bound with ``supersede``, drawn for most examples
  with a ``supersede_limit`` of 1-3), a send (or a commit) of an identity in flight tells
  its latest delivery to stop, and the claiming process hears it (``message.superseded``);
  however that delivery settles it is dropped, not retried (an ack counts ``acked``, a nack
  says "superseded", a release or an expired lease puts nothing back); after
  ``supersede_limit`` supersedes in a row of one identity its next delivery is left to run,
  and one that ran to its end starts the streak again;
* ``delete_topic`` drops everything of the topic; created again (maybe with other
  settings), it starts empty, and the deliveries of the deleted one settle nothing: an ack,
  nack, release or extension of one changes nothing and says so, although the new topic
  hands out the same delivery ids (a delivery is known by its generation, slot and id).

Where SPEC leaves an order open the model accepts any choice: two messages with the same
priority and due time are ordered by send order only when both took their place from a send
in the same slot (a promoted delayed message, a released one, or the retries of one
``recover`` call may come in any order among equals).

Checked after every step, from ``snapshot``: every stored message (state, slot, body, key,
priority, due time, attempts, delivery id, lease, dead letter's error and time) equals the
model's; the SPEC §2 invariant (a send of X not yet followed by a claim of X leaves X
pending, so some processing of X starts after the send); nothing lost (every body sent is
acknowledged, purged, pending, in flight or dead). ``stats`` and ``dead_letters`` are
compared as steps of their own (``stats`` promotes due messages, which must not change what
anyone sees). At the end every delay and lease runs out and everything is consumed: every
send must have been followed by a claim, and no supersede entry is left behind in Redis.

One slot checks exact order; four slots check priority and due order across slots on a
single node (and 64 slots, on a single node, the same through the heads index), and on a
cluster priority across slots, order within each slot, and that each slot's run within a
priority starts no later than anything left behind. Time only moves
when the model says (a manual clock starting at the real now). The size is
``RMQ_MODEL_EXAMPLES`` examples (default 60; a third of them on a cluster's four slots, half
on 64 slots) of up to 40 steps; ``RMQ_MODEL_SHRINK=0`` skips shrinking a failure.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
import zlib
from collections import Counter
from dataclasses import dataclass, field

import pytest
from async_bridge import client_of_kind
from helpers import ManualClock
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    RuleBasedStateMachine,
    initialize,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)
from model_transactions import CHECK_INTERVAL_MS, MAX_CHECKS, TransactionRules

import rmq
from rmq.storage.keys import SlotKeys
from rmq.storage.queue import keeps_heads

EXAMPLES = int(os.environ.get("RMQ_MODEL_EXAMPLES", "60"))
STEPS = 40
GROUP = "default"
MEDIUM = int(rmq.Priority.MEDIUM)
STAMPS_PER_MS = 30  # the slot clock keeps exact due times up to 32 ready stamps per ms

BODIES = [b"a", b"b", b"c", b"d", b"\x00nul"]  # few, so that sends merge; one starts with NUL
KEYS = [None, None, None, b"k1", b"k2"]
VERSIONS = [None, None, 1, 2, 3, 4]  # drawn for a send on a topic merging by key
STORED, MERGED, OUTDATED = 0, 1, 2  # what became of a send (rmq.storage.send's codes)
PRIORITIES = [None, 0, int(rmq.Priority.LOW), MEDIUM, int(rmq.Priority.HIGH), 255]
DELAYS = [1, 2, 5, 20, 100, 1000, 3000]
CLOCK_STEPS = [1, 2, 5, 10, 50, 200, 1000, 2500, 5000]
# the group's supersede_limit (SPEC §14), or None: it does not supersede
SUPERSEDE = st.sampled_from([None, 1, 2, 3])

Member = tuple[bytes, bytes | None]  # (body, key): what merges


@dataclass
class Pending:
    body: bytes
    key: bytes | None
    slot: int
    priority: int
    due: int
    attempts: int
    # Send order within the slot, for messages that took their place from a send (or a
    # retry or requeue that is stamped the same way); None when the place comes from a due
    # time (promoted delayed message, release): then unordered among equal due times.
    seq: int | None


@dataclass
class InFlight:
    message: rmq.Message
    priority: int
    attempts: int
    due: int
    lease_until: int

    @property
    def member(self) -> Member:
        return (self.message.body, self.message.key)


@dataclass
class Running:
    """A superseding group's latest delivery of an identity (SPEC §14): how many of the
    identity's deliveries in a row were superseded, this one included once it is."""

    where: tuple[str, int, int]
    streak: int
    superseded: bool = False


@dataclass
class Dead:
    id: str
    body: bytes
    key: bytes | None
    slot: int
    priority: int
    attempts: int
    due: int
    dead_at: int
    error: str


@dataclass
class Model:
    """SPEC §2-3 for one group of one topic, in memory."""

    slots: int
    max_retries: int
    backoff_ms: int
    backoff_max_ms: int
    visibility_ms: int
    by_key: bool = False  # the topic merges by key
    supersede_limit: int | None = None  # the group supersedes (SPEC §14), with this limit
    pending: dict[Member, Pending] = field(default_factory=dict)
    # (generation, slot, id): QueueMachine.in_flight_key
    inflight: dict[tuple[str, int, int], InFlight] = field(default_factory=dict)
    running: dict[Member, Running] = field(default_factory=dict)  # by identity
    superseded: set[tuple[str, int, int]] = field(default_factory=set)  # told to stop
    dead: dict[str, Dead] = field(default_factory=dict)
    counters: Counter[str] = field(default_factory=Counter)
    seq: int = 0
    versions: dict[Member, int] = field(default_factory=dict)  # the highest sent, by identity

    def slot_of(self, body: bytes, key: bytes | None) -> int:
        return zlib.crc32(body if key is None else key) & (self.slots - 1)

    def next_seq(self) -> int:
        self.seq += 1
        return self.seq

    def ident(self, body: bytes, key: bytes | None) -> Member:
        """What a message merges by: (body, key), or merging by key its identity."""
        return ((body if key is None else key), b"identity") if self.by_key else (body, key)

    def put(self, body: bytes, key: bytes | None, priority: int, due: int, now: int,
            attempts: int, seq: int | None, newest: bool = False) -> bool:
        """Into pending with the merge rules; True if it merged. ``seq`` is the send order
        to use if the message is ready now and takes a place of its own. ``newest``: a
        send, whose value replaces a pending one's when merging by key."""
        name = self.ident(body, key)
        held = self.pending.get(name)
        if held is None:
            self.pending[name] = Pending(body, key, self.slot_of(body, key), priority,
                                         due, attempts, seq if due <= now else None)
            return False
        if newest:
            held.body, held.key = body, key
        held.priority = max(held.priority, priority)
        if due < held.due:
            held.due = due
            held.seq = seq if due <= now else None
        elif due == held.due and seq is None:
            # a release in the millisecond the held one is due: it keeps its own place, which
            # may be earlier in that millisecond (the model does not track places within one)
            held.seq = None
        return True

    def send(self, body: bytes, key: bytes | None, priority: int, due: int, now: int,
             version: int | None = None) -> int:
        """A send; returns STORED, MERGED or OUTDATED (dropped: older than its identity's
        highest version)."""
        if version is not None:
            name = self.ident(body, key)
            if version < self.versions.get(name, -1):
                self.counters["outdated"] += 1
                return OUTDATED
            self.versions[name] = version
        merged = self.put(body, key, priority, due, now, 0, self.next_seq(), newest=True)
        self.counters["sent"] += 1
        self.counters["merged"] += merged
        self.supersede(self.ident(body, key))
        return MERGED if merged else STORED

    def supersede(self, name: Member) -> None:
        """A send of ``name``: its running delivery is told to stop, unless its streak of
        supersedes reached the limit (then it runs to its end) or it was told already."""
        entry = self.running.get(name)
        if (self.supersede_limit is None or entry is None or entry.superseded
                or entry.streak >= self.supersede_limit or entry.where not in self.inflight):
            return
        entry.streak += 1
        entry.superseded = True
        self.superseded.add(entry.where)
        self.counters["superseded"] += 1

    def claimed(self, name: Member, where: tuple[str, int, int]) -> None:
        """A claim of ``name`` in a superseding group: the identity's latest delivery, which
        carries the streak on from a superseded one (a finished one ended the streak)."""
        if self.supersede_limit is not None:
            before = self.running.get(name)
            streak = before.streak if before is not None and before.superseded else 0
            self.running[name] = Running(where, streak)

    def settle(self, where: tuple[str, int, int]) -> tuple[InFlight, bool]:
        """The delivery leaves in flight (acknowledged, failed, released or recovered);
        returns it and whether it was told to stop (then it is dropped). Its identity's
        entry goes with it, unless superseded: the streak waits for the next claim."""
        held = self.inflight.pop(where)
        name = self.ident(held.message.body, held.message.key)
        entry = self.running.get(name)
        if entry is not None and entry.where == where and not entry.superseded:
            del self.running[name]
        stopped = where in self.superseded
        self.superseded.discard(where)
        return held, stopped

    def ready(self, now: int) -> list[Pending]:
        return [p for p in self.pending.values() if p.due <= now]

    def claimable(self, now: int) -> list[Pending]:
        """What a claim may take now: ready, and, in a superseding group of a key-mode
        topic, of no identity in flight (one delivery of a key at a time, so that the last
        to complete is of its newest value)."""
        ready = self.ready(now)
        if not (self.by_key and self.supersede_limit is not None):
            return ready
        running = {self.ident(held.message.body, held.message.key)
                   for held in self.inflight.values()}
        return [p for p in ready if self.ident(p.body, p.key) not in running]

    def next_due(self, now: int) -> int | None:
        return min((p.due for p in self.pending.values() if p.due > now), default=None)

    def fail(self, where: tuple[str, int, int], error: str, now: int, seq: int | None) -> str:
        held, stopped = self.settle(where)
        if stopped:
            return "superseded"  # dropped, not retried: a newer message is pending
        m = held.message
        if held.attempts >= 1 + self.max_retries:
            self.dead[m.id] = Dead(m.id, m.body, m.key, m.slot, held.priority,
                                            held.attempts, held.due, now, error)
            self.counters["dead"] += 1
            return "dead"
        delay = 0
        if self.backoff_ms > 0:
            delay = min(self.backoff_ms * 2 ** (held.attempts - 1), self.backoff_max_ms)
        self.put(m.body, m.key, held.priority, now + delay, now, held.attempts, seq)
        self.counters["retried"] += 1
        return "retried"


def precedes(a: Pending, b: Pending, cluster: bool = False) -> bool:
    """Must ``a`` be claimed before ``b``? Priority, then due time, then send order within a
    slot when both have one. On a cluster only priority across slots (SPEC §3); what a
    cluster claim keeps of due order across slots is checked by ``claim`` itself."""
    if cluster and a.slot != b.slot:
        return a.priority > b.priority
    ka, kb = (-a.priority, a.due), (-b.priority, b.due)
    if ka != kb:
        return ka < kb
    return a.slot == b.slot and a.seq is not None and b.seq is not None and a.seq < b.seq


class QueueMachine(TransactionRules, RuleBasedStateMachine):
    """Subclasses set ``SLOTS``."""

    SLOTS = 1
    url = ""
    client_kind = "sync"

    def __init__(self) -> None:
        super().__init__()
        self.clock = ManualClock(time.time_ns() // 1_000_000)
        self.client = client_of_kind(self.client_kind)(self.url, clock=self.clock)
        self.topic = f"model-{uuid.uuid4().hex[:16]}"
        self.model: Model | None = None
        self.handed: list[rmq.Message] = []  # every delivery claimed since the topic's creation
        self.stamps_this_ms = (self.clock(), 0)
        self.unsatisfied: Counter[Member] = Counter()  # sends not yet followed by a claim
        self.ever_sent: set[Member] = set()
        self.ever_gone: set[Member] = set()  # acknowledged or purged at least once
        self.live = False  # the topic exists (deleted by delete_topic until created again)
        self.deleted: list[rmq.Message] = []  # deliveries handed out before a delete_topic
        self.generation = ""  # the topic's, as claims must report it
        # The group's max_in_flight (SPEC §10) and its permits: delivery -> deadline
        # (docs/storage.md, "Group limits")
        self.max_in_flight: int | None = None
        self.permits: dict[tuple[int, int], int] = {}

    # -- helpers -------------------------------------------------------------------------

    @property
    def m(self) -> Model:
        assert self.model is not None
        return self.model

    def now(self) -> int:
        return self.clock()

    def reserve_stamps(self, n: int) -> None:
        """Move the clock on by 1 ms if ``n`` more ready stamps this millisecond could make a
        slot's clock run ahead of real time (a documented limit the model does not cover)."""
        ms, used = self.stamps_this_ms
        if ms != self.now():
            ms, used = self.now(), 0
        if used + n > STAMPS_PER_MS:
            self.clock.advance(1)
            ms, used = self.now(), 0
        self.stamps_this_ms = (ms, used + n)

    def pool(self, data: st.DataObject) -> list[rmq.Message]:
        """Deliveries to act on: mostly those in flight, sometimes any recent one (a late
        ack, nack or release of a delivery already settled), or one of a deleted topic
        (whose ids the topic created again hands out anew)."""
        live = [f.message for f in self.m.inflight.values()]
        which = data.draw(st.integers(0, 5), label="in flight, recent or deleted?")
        if live and which >= 3:
            return live
        if self.deleted and (which >= 1 or not self.handed):
            return self.deleted[-12:]
        return self.handed[-12:]

    def pick(self, data: st.DataObject, label: str) -> list[rmq.Message]:
        pool = self.pool(data)
        return data.draw(st.lists(st.sampled_from(pool), min_size=1, max_size=4), label=label)

    def in_flight_key(self, message: rmq.Message) -> tuple[str, int, int]:
        # A topic created again hands out the same ids: the generation tells them apart.
        return (message.generation, message.slot, message.seq)

    # -- set-up --------------------------------------------------------------------------

    @initialize(max_retries=st.integers(0, 3),
                backoff=st.sampled_from([0, 0.005, 0.05]),
                backoff_max=st.sampled_from([0.012, 0.1, 1.0]),
                visibility=st.sampled_from([1.0, 3.0]),
                merge=st.sampled_from(["body", "body", "key"]),
                supersede=SUPERSEDE)
    def create(self, max_retries: int, backoff: float, backoff_max: float,
               visibility: float, merge: str, supersede: int | None) -> None:
        self.client.create_topic(self.topic, slots=self.SLOTS, max_retries=max_retries,
                                 retry_backoff=backoff, retry_backoff_max=backoff_max,
                                 visibility_timeout=visibility, merge=merge,
                                 check_interval=CHECK_INTERVAL_MS / 1000, max_checks=MAX_CHECKS)
        if supersede is not None:
            self.client.bind(self.topic, GROUP, supersede=True, supersede_limit=supersede)
        self.model = Model(self.SLOTS, max_retries, round(backoff * 1000),
                           round(backoff_max * 1000), round(visibility * 1000),
                           by_key=merge == "key", supersede_limit=supersede)
        self.live = True
        self.generation = self.client.topic(self.topic).generation

    @precondition(lambda self: self.live and self.handed)
    @rule()
    def delete_topic(self) -> None:
        """Everything of the topic goes; what was handed out stays in ``handed``, for the
        settling rules to try (mostly: the pool holds no delivery in flight)."""
        self.client.delete_topic(self.topic)
        self.live = False
        self.max_in_flight, self.permits = None, {}  # the limits go with the topic
        self.deleted += self.handed
        self.handed = []
        self.forget_transactions()
        m = self.m
        self.model = Model(m.slots, m.max_retries, m.backoff_ms, m.backoff_max_ms,
                           m.visibility_ms, by_key=m.by_key, supersede_limit=m.supersede_limit)
        self.unsatisfied.clear()
        self.ever_sent.clear()
        self.ever_gone.clear()

    @precondition(lambda self: self.model is not None and not self.live)
    @rule(max_retries=st.integers(0, 3),
          backoff=st.sampled_from([0, 0.005, 0.05]),
          backoff_max=st.sampled_from([0.012, 0.1, 1.0]),
          visibility=st.sampled_from([1.0, 3.0]),
          merge=st.sampled_from(["body", "key"]),
          supersede=SUPERSEDE)
    def create_topic_again(self, max_retries: int, backoff: float, backoff_max: float,
                           visibility: float, merge: str, supersede: int | None) -> None:
        """Under the same name, maybe other settings: a new generation, starting empty."""
        old = self.generation
        self.create(max_retries, backoff, backoff_max, visibility, merge, supersede)
        assert self.generation != old

    def teardown(self) -> None:
        try:
            # Drain only after a clean run: after a failure the model is out of step.
            if self.live and sys.exc_info()[0] is None:
                self.drain()
        finally:
            try:
                if self.live:
                    self.client.delete_topic(self.topic)
            finally:
                self.client.close()

    # -- sending -------------------------------------------------------------------------

    def _send_args(self, data: st.DataObject) -> dict:
        body = data.draw(st.sampled_from(BODIES), label="body")
        key = data.draw(st.sampled_from(KEYS), label="key")
        priority = data.draw(st.sampled_from(PRIORITIES), label="priority")
        when = data.draw(st.sampled_from(["now", "now", "delay", "at"]), label="when")
        args: dict = {"body": body}
        if key is not None:
            args["key"] = key
        if priority is not None:
            args["priority"] = priority
        if when == "delay":
            args["delay_ms"] = data.draw(st.sampled_from(DELAYS), label="delay_ms")
        elif when == "at":
            args["deliver_at"] = self.now() + data.draw(st.sampled_from(DELAYS), label="at+")
        if self.m.by_key:
            version = data.draw(st.sampled_from(VERSIONS), label="version")
            if version is not None:
                args["version"] = version
        return args

    def _model_send(self, args: dict, now: int) -> int:
        body, key = args["body"], args.get("key")
        priority = args.get("priority", MEDIUM)
        due = now + args["delay_ms"] if "delay_ms" in args else args.get("deliver_at", now)
        outcome = self.m.send(body, key, priority, due, now, args.get("version"))
        if outcome != OUTDATED:
            self.unsatisfied[self.m.ident(body, key)] += 1
            self.ever_sent.add(self.m.ident(body, key))
        return outcome

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def send(self, data: st.DataObject) -> None:
        self._send(self._send_args(data))

    @precondition(lambda self: self.live and self.m.inflight)
    @rule(data=st.data())
    def send_a_running_one_again(self, data: st.DataObject) -> None:
        """A newer value of a message being handled, as the founding case's price changes
        (the same body, or merging by key the same key with any body): where the group
        supersedes, the running delivery is told to stop (SPEC §14)."""
        where = data.draw(st.sampled_from(sorted(self.m.inflight)), label="running")
        args = self._again(self.m.inflight[where].message, self._send_args(data))
        others = data.draw(st.integers(0, 3), label="sent beside it")
        if not others:
            self._send(args)
            return
        batch = [self._send_args(data) for _ in range(others)]
        batch.insert(data.draw(st.integers(0, others), label="at"), args)
        self._send_many(data, batch)

    @precondition(lambda self: self.live)
    @rule(data=st.data(), rounds=st.integers(1, 4))
    def keep_changing(self, data: st.DataObject, rounds: int) -> None:
        """A message sent again, due now, each time one starts to run (a product whose
        price changes every second), the delivery it supersedes acknowledged, failed or
        left running: the streak reaches supersede_limit, then one runs to its end."""
        for _ in range(rounds):
            before = len(self.handed)
            self.claim(data.draw(st.sampled_from([1, 1, 3]), label="claim"), None)
            if len(self.handed) == before:
                return
            running = data.draw(st.sampled_from(self.handed[before:]), label="running")
            self._send(self._again(running, {
                "body": data.draw(st.sampled_from(BODIES), label="body"),
                "priority": data.draw(st.sampled_from(PRIORITIES[1:]), label="priority")}))
            how = data.draw(st.sampled_from(["ack", "nack", "leave"]), label="then")
            if how == "ack":
                self._ack([running])
            elif how == "nack":
                self.fail(running, "stopped early")

    def _again(self, running: rmq.Message, args: dict) -> dict:
        """``args`` made a newer value of ``running``'s message: its body, or merging by
        key its key with the body of ``args``."""
        args.pop("key", None)
        if running.key is not None:
            args["key"] = running.key
        if running.key is None or not self.m.by_key:
            args["body"] = running.body
        return args

    def _send(self, args: dict) -> None:
        self.reserve_stamps(1)
        now = self.now()
        if "deliver_at" in args:
            args["deliver_at"] = max(args["deliver_at"], now + 1)
        result = self.client.send(self.topic, **args)
        outcome = self._model_send(args, now)
        assert result.slot == self.m.slot_of(args["body"], args.get("key"))
        assert (result.merged, result.outdated) == (outcome == MERGED, outcome == OUTDATED), (
            f"send {args}: {result}, model {outcome}")

    @precondition(lambda self: self.live)
    @rule(data=st.data())
    def send_many(self, data: st.DataObject) -> None:
        n = data.draw(st.integers(1, 8), label="batch size")
        self._send_many(data, [self._send_args(data) for _ in range(n)])

    def _send_many(self, data: st.DataObject, batch: list[dict]) -> None:
        n = len(batch)
        if data.draw(st.booleans(), label="one priority and due time"):
            # the usual batch, which travels as one run (enqueue.lua's batched path)
            shared = {k: v for k, v in batch[0].items() if k not in ("body", "key")}
            batch = [{"body": a["body"], **({"key": a["key"]} if "key" in a else {}), **shared}
                     for a in batch]
        self.reserve_stamps(n)
        now = self.now()
        for args in batch:
            if "deliver_at" in args:
                args["deliver_at"] = max(args["deliver_at"], now + 1)
        counts = self.client.send_many(self.topic, batch)
        outcomes = [self._model_send(args, now) for args in batch]
        assert (counts.sent, counts.merged, counts.outdated) == (
            n, outcomes.count(MERGED), outcomes.count(OUTDATED))

    # -- consuming -----------------------------------------------------------------------

    @precondition(lambda self: self.live)
    @rule(count=st.sampled_from([1, 1, 2, 3, 5, 50]),
          lease=st.sampled_from([None, None, 0.5, 2.0]))
    def claim(self, count: int, lease: float | None) -> None:
        now = self.now()
        messages, next_due = self.client.claim_due(self.topic, GROUP, count, lease=lease)
        lease_ms = round(lease * 1000) if lease is not None else self.m.visibility_ms
        remaining = self.m.claimable(now)
        capacity = count
        if self.max_in_flight is not None:  # permits past their deadline are trimmed first
            self.permits = {k: d for k, d in self.permits.items() if d > now}
            capacity = max(0, self.max_in_flight - len(self.permits))
            for message in messages:
                self.permits[self.in_flight_key(message)] = now + lease_ms
            # (a lowered limit may leave more in flight until they settle, but no claim
            # adds to them)
            assert not messages or len(self.permits) <= self.max_in_flight, (
                f"{len(messages)} claimed of {count} with capacity {capacity}: "
                f"{sorted(self.permits)} in flight, max {self.max_in_flight}")
        want = min(count, len(remaining), capacity)
        got = [(m.body, m.key, m.priority, m.attempts, m.due_at) for m in messages]
        expected = [(p.body, p.key, p.priority, p.attempts + 1, p.due, p.seq)
                    for p in sorted(remaining, key=lambda p: (-p.priority, p.due, p.seq or 0))]
        assert len(messages) == want, f"claimed {got}, model has ready {expected}"
        previous_priority = 256
        cluster = self.client.is_cluster
        runs: dict[tuple[int, int], Pending] = {}  # (slot, priority) -> its first claimed
        for message in messages:
            entry = self.m.pending.get(self.m.ident(message.body, message.key))
            assert entry is not None and entry.due <= now, (
                f"claimed {message.body!r}/{message.key!r} which the model does not have ready;"
                f" claimed {got}, model ready {expected}")
            ahead = [p for p in remaining if p is not entry and precedes(p, entry, cluster)]
            assert not ahead, (
                f"claimed {message.body!r} (p={entry.priority}, due={entry.due}) before "
                f"{[(p.body, p.priority, p.due) for p in ahead]}; claimed {got}")
            assert message.priority <= previous_priority
            previous_priority = message.priority
            assert (message.topic, message.group, message.slot, message.generation) == (
                self.topic, GROUP, entry.slot, self.generation)
            assert (message.priority, message.attempts, message.due_at) == (
                entry.priority, entry.attempts + 1, entry.due), f"{message} vs model {entry}"
            assert message.lease_until == now + lease_ms
            remaining.remove(entry)
            runs.setdefault((entry.slot, entry.priority), entry)
            del self.m.pending[self.m.ident(message.body, message.key)]
            where = self.in_flight_key(message)
            assert where not in self.m.inflight, f"delivery id {where} handed out twice"
            self.m.inflight[where] = InFlight(message, entry.priority, entry.attempts + 1,
                                              entry.due, now + lease_ms)
            self.m.claimed(self.m.ident(message.body, message.key), where)
            self.unsatisfied[self.m.ident(message.body, message.key)] = 0
            self.handed.append(message)
        # A cluster claim takes a priority slot by slot, the slot with the oldest message
        # first (docs/semantics.md): each slot's run starts no later than anything left.
        for first in runs.values():
            passed = [p for p in remaining if precedes(p, first)]
            assert not passed, (f"claimed a run from {first.body!r} (slot {first.slot}, "
                                f"due={first.due}) past {[(p.body, p.due) for p in passed]}")
        if capacity < count:
            return  # held back: the reply's next due time may be the limit's
        expected_next = self.m.next_due(now) if len(messages) < count else None
        assert next_due == expected_next, f"next due {next_due}, model {expected_next}"

    @precondition(lambda self: self.handed or self.deleted)
    @rule(data=st.data())
    def ack(self, data: st.DataObject) -> None:
        self._ack(self.pick(data, "ack"))

    def _ack(self, batch: list[rmq.Message]) -> None:
        acked = self.client.ack(batch)
        self.settled(batch)
        expected = 0
        for message in batch:
            if self.in_flight_key(message) in self.m.inflight:
                # (one told to stop is acknowledged too: dropped, a newer one is pending)
                self.m.settle(self.in_flight_key(message))
                expected += 1
                self.ever_gone.add(self.m.ident(message.body, message.key))
        self.m.counters["acked"] += expected
        assert acked == expected

    @precondition(lambda self: self.handed or self.deleted)
    @rule(data=st.data(), error=st.sampled_from(["boom", "", "ünïcode, with, commas"]))
    def nack(self, data: st.DataObject, error: str) -> None:
        self.fail(data.draw(st.sampled_from(self.pool(data)), label="nack"), error)

    @precondition(lambda self: self.live)
    @rule(count=st.sampled_from([1, 3]), error=st.sampled_from(["boom", "again"]))
    def claim_and_fail(self, count: int, error: str) -> None:
        """A consumer whose handler fails: the quick way to retries and dead letters."""
        before = len(self.handed)
        self.claim(count, None)
        for message in self.handed[before:]:
            self.fail(message, error)

    def fail(self, message: rmq.Message, error: str) -> None:
        self.reserve_stamps(1)
        now = self.now()
        outcome = self.client.nack(message, error)
        self.settled([message])
        where = self.in_flight_key(message)
        expected = (self.m.fail(where, error, now, self.m.next_seq())
                    if where in self.m.inflight else None)
        assert outcome == expected

    @precondition(lambda self: self.handed or self.deleted)
    @rule(data=st.data())
    def release(self, data: st.DataObject) -> None:
        batch = self.pick(data, "release")
        now = self.now()
        released = self.client.release(batch)
        self.settled(batch)
        expected = 0
        for message in batch:
            if self.in_flight_key(message) in self.m.inflight:
                held, stopped = self.m.settle(self.in_flight_key(message))
                expected += 1
                if not stopped:  # one told to stop is dropped: a newer one is pending
                    self.m.put(message.body, message.key, held.priority, held.due, now,
                               held.attempts - 1, None)
        assert released == expected

    def namesakes(self) -> list[rmq.Message]:
        """Deliveries of a deleted topic whose slot and id a delivery in flight has now."""
        held = {(slot, seq) for _, slot, seq in self.m.inflight}
        return [m for m in self.deleted if (m.slot, m.seq) in held]

    @precondition(lambda self: self.live and self.deleted and self.namesakes())
    @rule(data=st.data(), how=st.sampled_from(["ack", "nack", "release", "extend"]))
    def settle_a_deleted_namesake(self, data: st.DataObject, how: str) -> None:
        """The old consumer's settle of a delivery whose id the new topic handed out again:
        it changes nothing (the invariant compares every stored message)."""
        message = data.draw(st.sampled_from(self.namesakes()), label="namesake")
        if how == "ack":
            assert self.client.ack([message]) == 0
        elif how == "nack":
            assert self.client.nack(message, "stale") is None
        elif how == "release":
            assert self.client.release([message]) == 0
        else:
            assert self.client.extend([message], 10.0) == [False]

    @precondition(lambda self: self.handed or self.deleted)
    @rule(data=st.data(), seconds=st.sampled_from([0.5, 2.0, 10.0]))
    def extend(self, data: st.DataObject, seconds: float) -> None:
        batch = self.pick(data, "extend")
        now = self.now()
        held = self.client.extend(batch, seconds)
        expected = []
        for message in batch:
            where = self.in_flight_key(message)
            entry = self.m.inflight.get(where)
            limited = self.max_in_flight is not None
            if limited and where not in self.permits:
                entry = None  # its unit is gone (or it never held one): its lease stays
            if entry is not None:
                entry.lease_until = now + int(seconds * 1000)
                if limited:
                    self.permits[where] = now + int(seconds * 1000)
            expected.append(entry is not None)
        assert held == expected

    @precondition(lambda self: self.live and self.m.superseded)
    @rule()
    def hear_superseded(self) -> None:
        """In the process that claimed them (the model's), the deliveries told to stop hear
        it (``message.superseded``, published on the topic's stop channel); no other does."""
        for where, held in self.m.inflight.items():
            told = where in self.m.superseded
            assert held.message.wait_superseded(timeout=5 if told else 0) == told, (
                f"delivery {held.message.id} of {held.message.body!r}: superseded "
                f"{held.message.superseded}, model {told}")

    def settled(self, messages: list[rmq.Message]) -> None:
        """A limited group's settled deliveries give back their permits."""
        if self.max_in_flight is not None:
            for message in messages:
                if message.generation == self.generation:  # an earlier topic's hold none
                    self.permits.pop(self.in_flight_key(message), None)

    @precondition(lambda self: self.live)
    @rule(max_in_flight=st.sampled_from([None, None, 1, 2, 5]))
    def set_limits(self, max_in_flight: int | None) -> None:
        stored = self.client.set_limits(self.topic, GROUP, max_in_flight=max_in_flight)
        assert stored == rmq.GroupLimits(max_in_flight)
        self.max_in_flight = max_in_flight

    @precondition(lambda self: self.live)
    @rule()
    def recover(self) -> None:
        # Redis's order (docs/storage.md, "leases"): longest expired first, then by the
        # lease score's low bits, the delivery's seq % 1024. It shows when two deliveries of
        # one message expire in the same millisecond: the first requeued takes a place in
        # pending with its attempt count, the second merges into it and keeps that count.
        expired = sorted((f.lease_until, f.message.seq % 1024, where)
                         for where, f in self.m.inflight.items() if f.lease_until <= self.now())
        self.reserve_stamps(len(expired))
        now = self.now()
        recovered = self.client.recover(self.topic)
        seq = self.m.next_seq()  # one call: the retries of equal due time come in any order
        outcomes = [self.m.fail(where, "lease expired", now, seq) for _, _, where in expired]
        assert recovered == len(expired) - outcomes.count("superseded")  # those dropped

    @precondition(lambda self: self.live and self.m.dead)
    @rule(data=st.data())
    def requeue_dead(self, data: st.DataObject) -> None:
        known = sorted(self.m.dead) + ["0-999999"]
        ids = data.draw(st.none() | st.lists(st.sampled_from(known), max_size=3, unique=True),
                        label="ids")
        targets = list(self.m.dead) if ids is None else [i for i in ids if i in self.m.dead]
        self.reserve_stamps(len(targets))
        now = self.now()
        requeued = self.client.requeue_dead(
            self.topic, GROUP, None if ids is None else [self.dead_letter_id(i) for i in ids])
        # One call per slot: with ids given they are requeued in that order, else in any.
        seq = self.m.next_seq() if ids is None else None
        for dead_id in targets:
            letter = self.m.dead.pop(dead_id)
            self.m.put(letter.body, letter.key, letter.priority, now, now, 0,
                       seq if seq is not None else self.m.next_seq())
        assert requeued == len(targets)

    @precondition(lambda self: self.live and len(self.m.dead) >= 2)
    @rule()
    def purge_dead(self) -> None:
        assert self.client.purge_dead(self.topic, GROUP) == len(self.m.dead)
        self.ever_gone |= {self.m.ident(d.body, d.key) for d in self.m.dead.values()}
        self.m.dead.clear()

    # -- time ----------------------------------------------------------------------------

    @rule(ms=st.sampled_from(CLOCK_STEPS))
    def tick(self, ms: int) -> None:
        self.clock.advance(ms)

    @precondition(lambda self: self.model is not None and self.m.pending)
    @rule(early=st.sampled_from([0, 0, 1]))
    def tick_to_next_due(self, early: int) -> None:
        """To the next due time of a delayed message (or 1 ms before it): the edge."""
        now = self.now()
        due = self.m.next_due(now)
        if due is not None:
            self.clock.advance(max(0, due - early - now))

    @precondition(lambda self: self.live and self.m.inflight)
    @rule(early=st.sampled_from([0, 0, 1]))
    def expire_and_recover(self, early: int) -> None:
        """To the next lease expiry (or 1 ms before it), then ``recover``: the edge."""
        now = self.now()
        expiry = min(f.lease_until for f in self.m.inflight.values())
        self.clock.advance(max(0, expiry - early - now))
        self.recover()

    # -- observing -----------------------------------------------------------------------

    @precondition(lambda self: self.live)
    @rule()
    def check_stats(self) -> None:
        """``stats`` (which promotes due messages, so it is a step, not an invariant)."""
        now = self.now()
        g = self.client.stats(self.topic).groups[GROUP]
        ready = self.m.ready(now)
        counters = dict(g.counters)
        # (nothing here is cancelled)
        assert (counters.pop("superseded", 0), counters.pop("cancelled", 0),
                counters.pop("outdated", 0)) == (
            self.m.counters["superseded"], 0, self.m.counters["outdated"])
        assert counters == {name: self.m.counters[name]
                            for name in ("sent", "merged", "filtered", "acked", "retried",
                                         "dead")}
        assert (g.ready, g.delayed, g.in_flight, g.dead) == (
            len(ready), len(self.m.pending) - len(ready), len(self.m.inflight),
            len(self.m.dead))
        assert g.ready_by_priority == dict(Counter(p.priority for p in ready))
        assert g.oldest_ready_ms == (now - min(p.due for p in ready) if ready else 0)
        for s in g.slots:
            assert s.next_due_at == min((p.due for p in self.m.pending.values()
                                         if p.due > now and p.slot == s.slot), default=None)
        self.dead_letters_agree()

    @invariant()
    def agrees_with_model(self) -> None:
        if self.model is None:
            return
        if not self.live:
            with pytest.raises(rmq.errors.UnknownTopic):
                list(self.client.snapshot(self.topic))
            return
        now = self.now()
        rows = list(self.client.snapshot(self.topic))
        stored = Counter()
        for r in rows:
            if r.state in ("ready", "delayed"):
                stored[("pending", r.slot, r.body, r.key, r.priority, r.due_at, r.attempts)] += 1
                if r.state == "ready":
                    assert r.due_at <= now
            elif r.state == "half":  # of an open transaction (model_transactions.py)
                stored[("half", r.slot, r.id, r.body, r.key, r.priority)] += 1
            elif r.state == "in_flight":
                stored[("in_flight", r.slot, r.body, r.key, r.priority, r.due_at, r.attempts,
                        r.id, r.lease_until)] += 1
            else:
                stored[("dead", r.slot, r.body, r.key, r.priority, r.due_at, r.attempts,
                        r.id, r.dead_at, r.error)] += 1
        model = Counter()
        for p in self.m.pending.values():
            model[("pending", p.slot, p.body, p.key, p.priority, p.due, p.attempts)] += 1
        for f in self.m.inflight.values():
            m = f.message
            model[("in_flight", m.slot, m.body, m.key, f.priority, f.due, f.attempts,
                   m.id, f.lease_until)] += 1
        for d in self.m.dead.values():
            model[("dead", d.slot, d.body, d.key, d.priority, d.due, d.attempts,
                   self.dead_letter_id(d.id), d.dead_at, d.error)] += 1
        model += self.model_halves()
        assert stored == model, (
            f"Redis has, model lacks: {sorted((stored - model).elements(), key=repr)}\n"
            f"model has, Redis lacks: {sorted((model - stored).elements(), key=repr)}")

        # SPEC §2: every send of X is followed by a processing of X that starts after it, so
        # while a send has not been followed by a claim, X must be pending.
        pending = {self.m.ident(r.body, r.key) for r in rows if r.state in ("ready", "delayed")}
        waiting = {member for member, n in self.unsatisfied.items() if n}
        assert waiting <= pending, f"sent, not claimed since, not pending: {waiting - pending}"
        # Nothing lost: every body sent was acknowledged (or purged) or is still held.
        held = {self.m.ident(r.body, r.key) for r in rows}
        assert self.ever_sent <= held | self.ever_gone

    def dead_letters_agree(self) -> None:
        """``dead_letters`` (the snapshot shows them too; this is the API's own view)."""
        letters = self.client.dead_letters(self.topic, GROUP)
        assert [(d.id, d.body, d.key, d.priority, d.attempts, d.error, d.due_at, d.dead_at)
                for d in letters] == sorted(
            ((self.dead_letter_id(d.id), d.body, d.key, d.priority, d.attempts, d.error,
              d.due, d.dead_at) for d in self.m.dead.values()), key=lambda t: (t[7], t[0]))

    def dead_letter_id(self, model_id: str) -> str:
        """A dead letter's id as the client gives it: the model's ``slot-seq`` and the
        topic's generation."""
        return f"{model_id}-{self.generation}" if self.generation else model_id

    # -- the end -------------------------------------------------------------------------

    def drain(self) -> None:
        """Let every lease expire and every delay pass, then consume everything: each send
        must have been followed by a claim, and only dead letters remain."""
        self.set_limits(None)
        for _ in range(4 * (self.m.max_retries + 2)):
            events = [p.due for p in self.m.pending.values()]
            events += [f.lease_until for f in self.m.inflight.values()]
            if events:
                self.clock.advance(max(1, max(events) - self.now() + 1))
            self.recover()
            self.agrees_with_model()
            while self.m.claimable(self.now()):
                before = len(self.handed)
                self.claim(50, None)
                self.agrees_with_model()
                fresh = self.handed[before:]
                # ack some, fail the others, as a consumer would
                done = [m for m in fresh if zlib.crc32(m.body) % 3]
                for message in (m for m in fresh if not zlib.crc32(m.body) % 3):
                    self.reserve_stamps(1)
                    outcome = self.client.nack(message, "drain")
                    where = self.in_flight_key(message)
                    assert outcome == self.m.fail(where, "drain", self.now(), self.m.next_seq())
                assert self.client.ack(done) == len(done)
                for message in done:
                    self.m.settle(self.in_flight_key(message))
                    self.ever_gone.add(self.m.ident(message.body, message.key))
                self.m.counters["acked"] += len(done)
                self.agrees_with_model()
            if not self.m.pending and not self.m.inflight:
                break
        assert not self.m.pending and not self.m.inflight
        assert not +self.unsatisfied, f"sends never followed by a claim: {+self.unsatisfied}"
        self.check_stats()
        # each identity's last delivery ran to its end: no streak or mark is left behind
        assert not self.m.running and not self.m.superseded
        left = [slot for slot in range(self.SLOTS) if self.client.redis.exists(
            SlotKeys(self.topic, slot).group(GROUP).running)]
        assert not left, f"supersede entries left in the running hashes of slots {left}"


class OneSlot(QueueMachine):
    SLOTS = 1


class FourSlots(QueueMachine):
    SLOTS = 4


class SixtyFourSlots(QueueMachine):
    """More slots than queue.HEADS_MIN_SLOTS: on a single node, claims go through the
    heads index, a window of slots at a time."""

    SLOTS = 64


def run(machine: type[QueueMachine], url: str, client_kind: str, examples: int) -> None:
    machine.url = url
    machine.client_kind = client_kind
    run_state_machine_as_test(machine, settings=settings(
        max_examples=examples, stateful_step_count=STEPS, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
        # RMQ_MODEL_SHRINK=0 reports the first failing run as found, without shrinking it.
        phases=[p for p in Phase
                if p is not Phase.shrink or os.environ.get("RMQ_MODEL_SHRINK", "1") != "0"],
    ))


@pytest.mark.single_node  # on a cluster one slot is what a single node does
@pytest.mark.timeout(900)  # a failure's shrinking, against Redis, can take minutes
def test_one_slot_agrees_with_the_model(redis_url: str, client_kind: str) -> None:
    """One slot: claims in exact order (priority, due time, send order)."""
    run(OneSlot, redis_url, client_kind, EXAMPLES)


@pytest.mark.model
@pytest.mark.timeout(900)
def test_four_slots_agree_with_the_model(redis_url: str, client_kind: str) -> None:
    """Four slots: exact order across slots on one node (one script call); on a cluster
    (heads read, then the best claimed) priority across slots, order within a slot, and
    runs that start at the oldest message: slower, so fewer examples."""
    cluster = rmq.Client(redis_url)
    try:
        examples = EXAMPLES // 3 if cluster.is_cluster else EXAMPLES
    finally:
        cluster.close()
    run(FourSlots, redis_url, client_kind, examples)


@pytest.mark.model
@pytest.mark.single_node  # the heads index is a single node's; a cluster claims as for four
@pytest.mark.timeout(900)
@pytest.mark.sync_client
def test_sixty_four_slots_agree_with_the_model(redis_url: str, client_kind: str) -> None:
    """64 slots, more than queue.HEADS_MIN_SLOTS: claims through the heads index, whose
    windows start at slots 0..count+7, so most claims widen to the slots the index asks
    for; exact order across slots all the same. Each step touches 64 slots: half the
    examples (a minute a client kind at the full count)."""
    assert keeps_heads(rmq.TopicSettings(slots=64), one_call=True)
    run(SixtyFourSlots, redis_url, client_kind, EXAMPLES // 2)
