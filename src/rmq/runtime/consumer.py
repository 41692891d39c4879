"""The worker runtime: ``Consumer`` runs a handler over a topic's messages (SPEC §3).

Threads, each with one job:
- the *fetcher* claims messages while there is room (``prefetch``), and otherwise sleeps on
  the topic's wake channel until work arrives or the next delayed message is due;
- the *workers* (``concurrency`` threads, or tasks on one event loop for ``async`` handlers)
  run the handler; returning acknowledges, raising retries;
- the *settler* acknowledges finished messages in batches and reports failures;
- the *keeper* extends the leases of held messages, heartbeats into the registry, picks up
  registry changes (pause, settings) and recovers expired leases of dead consumers.

Shutdown (``stop``, SIGINT, SIGTERM): stop claiming, give unstarted messages back at once
without counting an attempt, let running handlers finish within ``grace`` seconds.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import queue
import signal
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from typing import Any

from ..errors import RMQError
from ..message import Message
from ..settings import DEFAULT_GROUP, check_group_name
from ..storage import registry
from ..storage.keys import wake_channel

__all__ = ["Consumer", "run_all"]

log = logging.getLogger("rmq.consumer")
_STOP: Any = object()


class Consumer:
    """Runs ``handler(message)`` for each message of ``topic`` in ``group``.

    concurrency: handlers running at once (threads, or asyncio tasks for async handlers).
    prefetch: messages held at once, running or waiting (default 2 x concurrency).
    lease: seconds of each claim's lease (default: the topic's visibility_timeout); leases
        of held messages are extended every third of it, so a slow live handler is never
        duplicated.
    grace: seconds running handlers get to finish at shutdown.
    recover_interval: how often expired leases of other (dead) consumers are recovered.
    heartbeat_interval: how often this consumer reports itself to the registry.
    """

    def __init__(self, client: Any, topic: str, handler: Callable[[Message], Any], *,
                 group: str = DEFAULT_GROUP, concurrency: int = 8, prefetch: int | None = None,
                 lease: float | None = None, grace: float = 30.0, recover_interval: float = 3.0,
                 heartbeat_interval: float = 2.0, name: str | None = None):
        if concurrency < 1:
            raise ValueError(f"concurrency must be at least 1, got {concurrency}")
        self.client = client
        self.topic = topic
        self.group = check_group_name(group)
        self.handler = handler
        self.concurrency = concurrency
        self.prefetch = max(prefetch or 2 * concurrency, concurrency)
        self._claim_at_least = max(1, self.prefetch // 2)
        self.lease = lease
        self.grace = grace
        self.recover_interval = recover_interval
        self.heartbeat_interval = heartbeat_interval
        self.id = name or f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.is_async = inspect.iscoroutinefunction(handler)
        self.handled = 0
        self.failed = 0
        self._held: dict[tuple[int, int], Message] = {}  # claimed, not yet settled
        self._room = threading.Condition()
        # SimpleQueue: a put or get costs a fraction of queue.Queue's (no Condition in Python)
        self._waiting: queue.SimpleQueue[Any] = queue.SimpleQueue()  # claimed, not started
        self._settle: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._running = threading.Event()
        self._stopped = threading.Event()
        self._threads: list[threading.Thread] = []
        self._loop: asyncio.AbstractEventLoop | None = None
        self._started_at = time.time()
        self._visibility_timeout = 30.0  # the topic's, refreshed whenever the registry answers

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> Consumer:
        """Bind the group, register, and start the threads; returns at once."""
        self.client.topic(self.topic, fresh=True)
        self.client.bind(self.topic, self.group)
        self._heartbeat()
        self._running.set()
        if self.is_async:
            self._loop = asyncio.new_event_loop()
            self._async_queue: asyncio.Queue[Message] = asyncio.Queue()
            self._spawn("async-workers", self._async_workers)
        self._spawn("fetcher", self._fetch_loop)
        self._spawn("settler", self._settle_loop)
        self._spawn("keeper", self._keep_loop)
        if not self.is_async:
            for i in range(self.concurrency):
                self._spawn(f"worker-{i}", self._work_loop)
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
        self._wake_fetcher()
        self._give_back_unstarted()
        deadline = time.monotonic() + grace
        with self._room:
            while self._held and time.monotonic() < deadline:
                self._room.wait(timeout=max(0.0, deadline - time.monotonic()))
        for _ in range(self.concurrency):
            self._waiting.put(_STOP)
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
        self._settle.put(_STOP)
        self._stopped.set()
        for thread in self._threads:
            # A worker still inside its handler after the grace is not waited for (stop must
            # return within the grace); the fetcher, settler and keeper exit promptly.
            is_worker = thread.name.startswith(("rmq-worker-", "rmq-async-workers"))
            thread.join(timeout=max(0.1, deadline - time.monotonic()) + (0 if is_worker else 5))
        if self._held:
            log.warning("%s: %d handlers still running after %.1fs grace; their messages "
                        "return to pending when their leases expire", self.id, len(self._held),
                        grace)
        self._safe(lambda: self.client._run(registry.forget_consumer(self.topic, self.id)))

    @property
    def running(self) -> bool:
        return self._running.is_set()

    def _spawn(self, role: str, target: Callable[[], None]) -> None:
        thread = threading.Thread(target=target, name=f"rmq-{role}-{self.topic}", daemon=True)
        thread.start()
        self._threads.append(thread)

    def _safe(self, action: Callable[[], Any]) -> Any:
        # The runtime's threads must outlive any error: a dead thread would stall the
        # consumer silently with messages ready.
        try:
            return action()
        except RMQError as exc:
            log.warning("%s: %s", self.id, exc)
        except Exception:
            log.exception("%s: unexpected error (carrying on)", self.id)
        return None

    # -- fetching -------------------------------------------------------------------------

    def _room_left(self) -> int:
        # Claim when half the prefetch is free (or nothing is held): one claim of many costs
        # Redis far less than many claims of one.
        with self._room:
            while self._running.is_set() and self._held and (
                    self.prefetch - len(self._held) < self._claim_at_least):
                self._room.wait(timeout=1.0)
            return self.prefetch - len(self._held)

    def _fetch_loop(self) -> None:
        waiter = None
        while self._running.is_set():
            try:
                waiter = waiter or self.client.waiter(self.topic)
                room = self._room_left()
                if not self._running.is_set():
                    break
                info = self.client.topic(self.topic)
                if info.paused:
                    waiter.wait(1.0)
                    continue
                waiter.drain()
                messages, next_due = self.client.claim_until(
                    self.topic, self.group, room, lease=self.lease)
                if not self._running.is_set():
                    self.client.release(messages)
                    break
                if messages:
                    self._hand_out(messages)
                    continue
                waiter.wait(self._idle_timeout(next_due))
            except RMQError as exc:
                log.warning("%s: fetch failed, retrying: %s", self.id, exc)
                self._stopped.wait(1.0)  # back off while Redis is unreachable
            except Exception:
                log.exception("%s: unexpected fetch error, retrying", self.id)
                self._stopped.wait(1.0)

    def _idle_timeout(self, next_due: int | None) -> float:
        # Sleep until the next delayed message is due, but wake for recovery regardless.
        if next_due is None:
            return self.recover_interval
        return min(self.recover_interval, max(0.0, (next_due - self.client.clock()) / 1000))

    def _hand_out(self, messages: list[Message]) -> None:
        with self._room:
            for message in messages:
                self._held[(message.slot, message.id)] = message
        if self.is_async and self._loop is not None:
            # one wake-up of the event loop per claim, not one per message
            self._loop.call_soon_threadsafe(self._queue_async, messages)
        else:
            for message in messages:
                self._waiting.put(message)

    def _queue_async(self, messages: list[Message]) -> None:
        for message in messages:
            self._async_queue.put_nowait(message)

    def _wake_fetcher(self) -> None:
        with self._room:
            self._room.notify_all()
        # The fetcher may be asleep on the wake channel: a publish wakes it to see the stop.
        self._safe(lambda: self.client.redis.publish(wake_channel(self.topic), "stop"))

    def _give_back_unstarted(self) -> None:
        unstarted = []
        while True:
            try:
                item = self._waiting.get_nowait()
            except queue.Empty:
                break
            if item is not _STOP:
                unstarted.append(item)
        if self.is_async and self._loop is not None:
            unstarted += self._drain_async_queue()
        if unstarted:
            self._safe(lambda: self.client.release(unstarted))
            self._forget(unstarted)

    # -- handling -------------------------------------------------------------------------

    def _work_loop(self) -> None:
        while True:
            message = self._waiting.get()
            if message is _STOP:
                return
            if (message.slot, message.id) not in self._held:
                continue  # its lease was lost while it waited: another consumer has it
            try:
                self.handler(message)
            except Exception as exc:  # noqa: BLE001 - any handler failure is a retry
                self._settle.put((message, exc))
            else:
                self._settle.put((message, None))

    def _async_workers(self) -> None:
        loop = self._loop
        assert loop is not None
        asyncio.set_event_loop(loop)

        async def work() -> None:
            while True:
                message = await self._async_queue.get()
                if (message.slot, message.id) not in self._held:
                    continue  # its lease was lost while it waited: another consumer has it
                try:
                    await self.handler(message)
                except Exception as exc:  # noqa: BLE001 - any handler failure is a retry
                    self._settle.put((message, exc))
                else:
                    self._settle.put((message, None))

        tasks = [loop.create_task(work()) for _ in range(self.concurrency)]
        loop.run_forever()
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.close()

    def _drain_async_queue(self) -> list[Message]:
        drained: list[Message] = []

        def take() -> None:
            while not self._async_queue.empty():
                drained.append(self._async_queue.get_nowait())

        done = threading.Event()
        assert self._loop is not None
        self._loop.call_soon_threadsafe(lambda: (take(), done.set()))
        done.wait(timeout=5)
        return drained

    # -- settling -------------------------------------------------------------------------

    def _settle_loop(self) -> None:
        while True:
            first = self._settle.get()
            batch = [first]
            while len(batch) < 1000:
                try:
                    batch.append(self._settle.get_nowait())
                except queue.Empty:
                    break
            stop = any(item is _STOP for item in batch)
            done = [item for item in batch if item is not _STOP]
            # Forget them before settling: the keeper must not extend (and then report as
            # lost) a lease this ack is ending, and the fetcher may claim again meanwhile.
            self._forget(message for message, _ in done)
            succeeded = [message for message, error in done if error is None]
            if succeeded:
                self._safe(lambda ok=succeeded: self.client.ack(ok))
            for message, error in done:
                if error is not None:
                    self.failed += 1
                    log.info("%s: handler failed on %s: %r", self.id, message.delivery_id, error)
                    self._safe(lambda m=message, e=error: self.client.nack(m, e))
            self.handled += len(succeeded)
            if stop and self._settle.empty():
                return

    def _forget(self, messages: Iterable[Message]) -> None:
        with self._room:
            for message in messages:
                self._held.pop((message.slot, message.id), None)
            self._room.notify_all()

    # -- housekeeping ---------------------------------------------------------------------

    def _keep_loop(self) -> None:
        # Every step is guarded: an outage longer than the reconnect budget must not end the
        # thread, or nothing would extend, heartbeat or recover once Redis is back.
        last_recover = 0.0
        while not self._stopped.wait(self._keep_interval()):
            extended = self._extend_held()
            self._heartbeat()
            self._safe(lambda: self.client.record_history(self.topic))  # one per 5 s, shared
            # Recover only right after our own leases were extended: after an outage, an
            # extend that failed just before Redis came back would let recovery take back
            # the messages this consumer is still running.
            if extended and time.monotonic() - last_recover >= self.recover_interval:
                last_recover = time.monotonic()
                self._safe(lambda: self.client.recover(self.topic))

    def _lease_seconds(self) -> float:
        if self.lease:
            return self.lease
        info = self._safe(lambda: self.client.topic(self.topic))
        if info is not None:
            self._visibility_timeout = info.settings.visibility_timeout
        return self._visibility_timeout

    def _keep_interval(self) -> float:
        return min(self.heartbeat_interval, self.recover_interval, self._lease_seconds() / 3)

    def _extend_held(self) -> bool:
        """Extend the leases of held messages; False if Redis could not be asked."""
        with self._room:
            held = list(self._held.values())
        if held:
            kept = self._safe(lambda: self.client.extend(held, self._lease_seconds()))
            if kept is None:
                return False
            with self._room:  # settled meanwhile is not lost
                lost = [m for m, ok in zip(held, kept, strict=True)
                        if not ok and (m.slot, m.id) in self._held]
            # Leases lost (this consumer was frozen or cut off): another consumer has these
            # messages now, so the ones not started yet are dropped, not run.
            self._forget(lost)
            for message in lost:
                log.warning("%s: lease of %s was lost; it will be delivered again",
                            self.id, message.delivery_id)
        return True

    def _heartbeat(self) -> None:
        record = {"group": self.group, "host": socket.gethostname(), "pid": os.getpid(),
                  "started_at": self._started_at, "last_seen": time.time(),
                  "handled": self.handled, "failed": self.failed,
                  "concurrency": self.concurrency, "in_flight": len(self._held)}
        self._safe(lambda: self.client._run(registry.heartbeat(self.topic, self.id, record)))


def run_all(consumers: list[Consumer]) -> None:
    """Start ``consumers`` and block until SIGINT or SIGTERM, then stop them gracefully."""
    stop = threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    try:
        for consumer in consumers:
            consumer.start()
        while not stop.is_set() and all(c.running for c in consumers):
            stop.wait(0.5)
    finally:
        for consumer in consumers:
            consumer.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
