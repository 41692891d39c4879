"""Claiming for a consumer, from one thread: claim what the prefetch wants (``prefetch.py``),
hand the messages to the workers, and otherwise sleep on the topic's wake-up channel until
work arrives or the next delayed message is due (an idle consumer does not poll). A claim
held back by the group's limits sleeps on the group's wake list instead, until capacity is
given back to it (docs/limits.md). Each claim's round trip is timed for the prefetch.

A batch consumer (``batches.py``) claims a batch at a time instead, while its ``BatchRoom``
has room, and with a ``batch_wait_ms`` first lets its ``Gather`` wait for the batch to fill
in Redis."""

from __future__ import annotations

import threading
import time

from ..errors import RMQError, UnknownTopic
from ..settings import GroupLimits
from .batch_workers import BatchWorkers
from .batches import BatchRoom, Gather
from .holdings import Holdings
from .prefetch import Prefetch
from .protocol import QueueClient
from .threads import guarded, log, spawn
from .workers import Workers

__all__ = ["Fetcher"]


class Fetcher:
    """Claims into ``holdings`` while ``running`` is set; ``lease`` as the consumer's.
    ``batches``: a batch consumer's room, which then sizes the claims instead of
    ``prefetch``; ``gather``: its wait for a batch to fill."""

    def __init__(self, client: QueueClient, topic: str, group: str, holdings: Holdings,
                 prefetch: Prefetch, workers: Workers | BatchWorkers, running: threading.Event,
                 stopped: threading.Event, *, consumer_id: str, lease: float | None,
                 idle_wake: float, batches: BatchRoom | None = None,
                 gather: Gather | None = None):
        self.client, self.topic, self.group = client, topic, group
        self.holdings, self.prefetch, self.workers = holdings, prefetch, workers
        self.running, self.stopped = running, stopped
        self.consumer_id, self.lease, self.idle_wake = consumer_id, lease, idle_wake
        self._said_at: GroupLimits | None = None  # the limits it last said it waits at
        self.batches, self.gather = batches, gather
        self.thread: threading.Thread | None = None

    def start(self) -> None:
        self.thread = spawn("fetcher", self.topic, self._fetch_loop)

    def wake(self) -> None:
        """Wake the fetcher wherever it sleeps, to see that the consumer stops."""
        self.holdings.wake_all()
        if self.batches is not None:
            self.batches.wake_all()
        if self.gather is not None:
            self.gather.interrupt()
        # It may be asleep on the wake channel.
        guarded(self.consumer_id, lambda: self.client.wake(self.topic))

    def _fetch_loop(self) -> None:
        try:
            self._fetch()
        finally:
            if self.gather is not None:
                self.gather.close()

    def _fetch(self) -> None:
        waiter = None
        gone = False  # the topic was found deleted (said once, not every second)
        while self.running.is_set():
            try:
                waiter = waiter or self.client.waiter(self.topic)
                limits = self.client.topic(self.topic).limits(self.group)
                capped = limits.holds_permits
                self.prefetch.capped = capped
                if self.batches is None:
                    wanted = self.holdings.room(self.prefetch, self.running)
                else:
                    self.batches.capped = capped
                    wanted = self.batches.room(self.running)
                if not self.running.is_set():
                    break
                if self.client.topic(self.topic).paused:
                    waiter.wait(1.0)
                    continue
                if self.gather is not None and not self.gather.ready():
                    continue
                waiter.drain()
                asked = time.perf_counter()
                messages, next_due = self.client.claim_due(
                    self.topic, self.group, wanted, lease=self.lease, holder=self.consumer_id)
                if self.batches is None:  # a batch's size is given, not measured
                    self.prefetch.claimed(time.perf_counter() - asked, messages)
                if gone:
                    log.info("%s: topic %r exists again; claiming", self.consumer_id,
                             self.topic)
                    gone = False
                if not self.running.is_set():
                    self.client.release(messages)
                    break
                if messages:
                    self.holdings.add(messages, self.client.now())
                    if self.batches is not None:
                        self.batches.taken()
                        if self.gather is not None:
                            self.gather.claimed(self.batches.full)
                    self.workers.submit(messages)
                    continue
                if self.client.wait_for_capacity(self.topic, self.group, self.idle_wake):
                    self._waited_at_limit(limits)
                else:
                    waiter.wait(self._idle_timeout(next_due))
            except UnknownTopic:
                if gone:
                    log.debug("%s: topic %r still does not exist", self.consumer_id, self.topic)
                else:
                    log.error("%s: topic %r does not exist (deleted?): this consumer claims "
                              "nothing until it is created again; stop it, or create the "
                              "topic (and bind group %r if it is not the default)",
                              self.consumer_id, self.topic, self.group)
                    gone = True
                self.stopped.wait(1.0)
            except RMQError as exc:
                log.warning("%s: fetch failed, retrying: %s", self.consumer_id, exc)
                self.stopped.wait(1.0)  # back off while Redis is unreachable
            except Exception:
                log.exception("%s: unexpected fetch error, retrying", self.consumer_id)
                self.stopped.wait(1.0)

    def _waited_at_limit(self, limits: GroupLimits) -> None:
        # Said once for each limits it meets, not at every wait: a pool of workers is at its
        # group's limit most of the time, and must not fill the log with it.
        if limits == self._said_at:
            return
        self._said_at = limits
        held = [f"max in flight {limits.max_in_flight}"] if limits.max_in_flight else []
        if limits.rate is not None:
            held.append(f"rate {limits.rate[0]} per {limits.rate[1]:g}s")
        if limits.max_batches is not None:
            held.append(f"max batches {limits.max_batches}")
        log.info("%s: group %r of topic %r is at its limit (%s): waiting for capacity, woken "
                 "as it comes back (said once for these limits)", self.consumer_id,
                 self.group, self.topic, ", ".join(held) or "none now")

    def _idle_timeout(self, next_due: int | None) -> float:
        # Sleep until the next delayed message is due, but wake for recovery regardless.
        if next_due is None:
            return self.idle_wake
        return min(self.idle_wake, max(0.0, (next_due - self.client.now()) / 1000))
