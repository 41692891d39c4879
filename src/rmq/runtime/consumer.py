"""``Consumer``: runs a handler over a topic's messages (SPEC §3).

A consumer is a few parts, each in its own module and thread:
- the *fetcher* (``fetcher.py``) claims what the *prefetch* (``prefetch.py``: given, or
  adapted to the handler's measured speed) wants, and otherwise sleeps on the topic's wake
  channel until work arrives or the next delayed message is due;
- the *workers* (``workers.py``: ``concurrency`` threads, or tasks on one event loop for
  ``async`` handlers) run the handler; returning acknowledges, raising retries;
- the *settler* (``settler.py``) acknowledges finished messages in batches and reports
  failures, logging each in one line (its traceback at the last attempt);
- the *keeper* (``keeper.py``) extends the leases of held messages, heartbeats into the
  registry, picks up the topic's settings and recovers expired leases of dead consumers;
- the *holdings* (``holdings.py``) are what they share: the messages held and the room left.

A batch consumer (``batch=N``, ``batches.py``) claims up to N messages at a time and hands
them to one handler call (``batch_workers.py``); its settler, keeper and holdings are the
same, each message settled, extended and given back on its own.

Shutdown (``stop``, SIGINT, SIGTERM): stop claiming, give unstarted messages back at once
without counting an attempt, let running handlers finish within ``grace`` seconds.
"""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, cast

from ..errors import InvalidArgument, NotReplicated
from ..message import Message
from ..settings import (
    DEFAULT_GROUP,
    MAX_LEASE,
    check_group_name,
    check_int,
    check_number,
    check_topic_name,
)
from ..storage.registry import ConsumerState
from .batch_workers import BatchWorkers, batch_workers_for
from .batches import BatchRoom, Gather, check_batch_options
from .fetcher import Fetcher
from .holdings import Holdings
from .keeper import Keeper
from .prefetch import Prefetch
from .protocol import QueueClient
from .settler import Settler
from .signals import run_all
from .threads import guarded, log
from .workers import Starts, Workers, is_async, workers_for

__all__ = ["Consumer"]

MAX_HELD = 10_000  # messages one claim takes at most, so the most a consumer may hold
_HOUR = 3600.0


def _check_options(handler: object, concurrency: object, prefetch: object, lease: object,
                   grace: object, recover_interval: object, heartbeat_interval: object,
                   name: object) -> None:
    """Each option of ``Consumer`` in its range, else InvalidArgument naming it."""
    if not callable(handler):
        raise InvalidArgument(f"handler must be a function of a Message, got {handler!r}")
    check_int("concurrency", concurrency, 1, MAX_HELD, InvalidArgument)
    if prefetch is not None:
        check_int("prefetch", prefetch, 1, MAX_HELD, InvalidArgument)
    if lease is not None:
        check_number("lease", lease, 0.01, MAX_LEASE, InvalidArgument)
    check_number("grace", grace, 0, 24 * _HOUR, InvalidArgument)
    check_number("recover_interval", recover_interval, 0.01, _HOUR, InvalidArgument)
    check_number("heartbeat_interval", heartbeat_interval, 0.01, _HOUR, InvalidArgument)
    if name is not None and (not isinstance(name, str) or not 1 <= len(name) <= 256):
        raise InvalidArgument(f"name must be a str of 1-256 characters, got {name!r}")


class Consumer:
    """Runs ``handler(message)`` for each message of ``topic`` in ``group``, or with
    ``batch=N`` ``handler(messages)`` on lists of up to N of them.

    concurrency: handlers running at once (threads, or asyncio tasks for async handlers).
    prefetch: messages held at once, running or waiting (at least ``concurrency``). Default:
        adaptive, from the handler's measured speed and the claim's round trip: about
        ``concurrency + 1`` for a slow handler (so the rest stay pending and duplicates
        merge), batches of up to 500 a claim for a fast one (docs/semantics.md, "Prefetch").
    lease: seconds of each claim's lease (default: the topic's visibility_timeout); leases
        of held messages are extended every third of it, so a slow live handler is never
        duplicated.
    grace: seconds running handlers get to finish at shutdown.
    recover_interval: how often expired leases of other (dead) consumers are recovered.
    heartbeat_interval: how often this consumer reports itself to the registry.
    name: this consumer's id in the registry (default: host-pid-random).
    batch: hand the handler a list of up to this many messages (1-10 000) at a time.
        Returning acknowledges them all; raising retries them all (an attempt each);
        raising ``rmq.BatchFailed({message: error, ...})`` retries those it names and
        acknowledges the rest. ``concurrency`` then counts batches handled at once, and the
        consumer holds one batch more, being claimed, unless the group has a
        ``max_in_flight`` or ``max_batches``; ``prefetch`` does not apply.
    batch_wait_ms: with a batch, once a message is ready, wait up to this many ms more for
        the batch to fill while its messages stay pending in Redis (merging with duplicates
        sent meanwhile), then take what is there; a message at ``Priority.HIGH`` or above is
        taken at once. Default 0: take what is ready.
    cancel_superseded: for an ``async`` handler, cancel its task when its delivery is told
        to stop (a newer message superseded it, or it was cancelled: SPEC §14); the
        delivery is then dropped, not retried. A plain handler reads
        ``message.superseded`` or waits with ``message.wait_superseded(timeout)`` instead.
    """

    def __init__(self, client: QueueClient, topic: str,
                 handler: Callable[[Message], Any] | Callable[[list[Message]], Any], *,
                 group: str = DEFAULT_GROUP, concurrency: int = 8, prefetch: int | None = None,
                 lease: float | None = None, grace: float = 30.0, recover_interval: float = 3.0,
                 heartbeat_interval: float = 2.0, name: str | None = None,
                 batch: int | None = None, batch_wait_ms: int = 0,
                 cancel_superseded: bool = False):
        _check_options(handler, concurrency, prefetch, lease, grace, recover_interval,
                       heartbeat_interval, name)
        check_batch_options(batch, batch_wait_ms, prefetch, MAX_HELD)
        if not isinstance(cancel_superseded, bool):
            raise InvalidArgument(f"cancel_superseded must be True or False, got "
                                  f"{cancel_superseded!r}")
        if cancel_superseded and not is_async(handler):
            raise InvalidArgument("cancel_superseded=True cancels an async handler's task: "
                                  "a plain handler reads message.superseded instead")
        self.client = client
        self.topic = check_topic_name(topic)
        self.group = check_group_name(group)
        self.handler = handler
        self.concurrency = concurrency
        self.batch, self.batch_wait_ms = batch, batch_wait_ms
        self._prefetch = Prefetch(concurrency, prefetch)
        self.lease = lease
        self.grace = grace
        self.id = name or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self._started_at = client.now()
        self._running = threading.Event()
        self._stopped = threading.Event()
        self._holdings = Holdings()
        self._settler = Settler(client, self._holdings, self._prefetch, self.id, topic)
        # the clock itself, not client.now(): workers read it once a message
        starts = Starts(self._holdings, client.clock, self._settler.give_back)
        self._batches = None if batch is None else BatchRoom(concurrency, batch)
        self._workers: Workers | BatchWorkers
        if self._batches is None:
            self._workers = workers_for(cast(Callable[[Message], Any], handler), concurrency,
                                        starts, self._settler.finished, topic, client.url,
                                        cancel_superseded)
        else:
            self._workers = batch_workers_for(cast(Callable[[list[Message]], Any], handler),
                                              concurrency, starts,
                                              self._settler.batch_finished, topic,
                                              client.url, self._batches, cancel_superseded)
        gather = (Gather(client, self.topic, self.group, batch, batch_wait_ms, recover_interval,
                         self.id)
                  if batch is not None and batch_wait_ms > 0 else None)
        self._keeper = Keeper(client, topic, self._holdings, self.id, self._state,
                              self._stopped, lease=lease, heartbeat_interval=heartbeat_interval,
                              recover_interval=recover_interval)
        self._fetcher = Fetcher(client, topic, self.group, self._holdings, self._prefetch,
                                self._workers, self._running, self._stopped,
                                consumer_id=self.id, lease=lease, idle_wake=recover_interval,
                                batches=self._batches, gather=gather)

    @property
    def handled(self) -> int:
        """Messages whose handler returned (and that were acknowledged) since the start."""
        return self._settler.handled

    @property
    def failed(self) -> int:
        """Handler runs that raised since the start (failed attempts)."""
        return self._settler.failed

    @property
    def failed_messages(self) -> int:
        """Distinct messages whose handler raised since the start: a message retried here
        counts once however often it fails (``failed`` counts each attempt)."""
        return self._settler.failed_messages

    @property
    def prefetch(self) -> int:
        """The most this consumer holds at once now (running or waiting): the ``prefetch``
        given (at least ``concurrency``), or the adaptive limit as last measured; a batch
        consumer's batches at most, full."""
        if self._batches is not None:
            return self._batches.limit * self._batches.size
        return self._prefetch.limit

    @property
    def held(self) -> int:
        """Messages claimed and not yet finished: running, or waiting to start."""
        return len(self._holdings)

    @property
    def running(self) -> bool:
        return self._running.is_set()

    def _state(self) -> ConsumerState:
        return ConsumerState(self.id, self.topic, self.group, socket.gethostname(), os.getpid(),
                             self._started_at, self.concurrency, len(self._holdings),
                             self.handled, self.failed, self._settler.times.times)

    def start(self) -> Consumer:
        """Bind the group, register, and start the threads; returns at once."""
        self.client.topic(self.topic, fresh=True)
        try:
            self.client.bind(self.topic, self.group, keep_filters=True)
        except NotReplicated as exc:
            # The binding is stored on the primary and reaches the replicas when they catch
            # up; a worker starting while a replica stalls must not be refused for it.
            log.warning("%s: %s; consuming all the same", self.id, exc)
        self._running.set()
        self._keeper.start()
        self._workers.start()
        self._settler.start()
        self._fetcher.start()
        return self

    def run(self) -> None:
        """Start, block until SIGINT or SIGTERM (or ``stop`` from another thread), stop."""
        run_all([self])

    def stop(self, grace: float | None = None) -> None:
        """Stop claiming, give back unstarted messages, wait up to ``grace`` seconds for
        running handlers, flush acknowledgements, and deregister."""
        if not self._running.is_set():
            return
        grace = self.grace if grace is None else grace
        self._running.clear()
        self._fetcher.wake()
        unstarted = self._workers.take_unstarted()
        if unstarted:
            guarded(self.id, lambda: self.client.release(unstarted))
            self._holdings.forget(unstarted)
        deadline = time.monotonic() + grace
        self._holdings.wait_empty(deadline)
        self._workers.stop()
        self._settler.stop()
        self._stopped.set()
        # A worker still inside its handler after the grace is not waited for (stop must
        # return within the grace); the fetcher, settler and keeper exit promptly.
        for thread in self._workers.threads:
            thread.join(timeout=max(0.1, deadline - time.monotonic()))
        for part in (self._fetcher, self._settler, self._keeper):
            if part.thread is not None:
                part.thread.join(timeout=max(0.1, deadline - time.monotonic()) + 5)
        if len(self._holdings):
            log.warning("%s: %d handlers still running after %.1fs grace; their messages "
                        "return to pending when their leases expire", self.id,
                        len(self._holdings), grace)
        guarded(self.id, lambda: self.client.forget_consumer(self.topic, self.id))
