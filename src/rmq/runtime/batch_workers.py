"""Running a batch handler (``batches.py``): ``concurrency`` threads for a plain function, or
as many tasks on one event loop (in a thread of its own) for an ``async`` one, each taking
one claimed batch at a time. As ``workers.py`` does for single messages, a worker starts only
the messages of its batch still held whose lease has not (nearly) run out (the others go to
``give_back`` or are already another consumer's), and reports the run to ``finished``: the
messages it acknowledges, those that failed with their errors (``batches.outcomes``), and
its time, one run whatever its size; then the batch's room is free (``BatchRoom.finished``).
With a tracer provider configured (``rmq/otel.py``), each call runs in one consumer span
linked to the batch's messages.
"""

from __future__ import annotations

import asyncio
import inspect
import queue
import threading
import time
from collections.abc import Callable
from functools import partial
from typing import Any

from .. import otel
from ..message import Message
from .batches import BatchRoom, outcomes
from .threads import spawn
from .workers import Starts, cancelled_when_stopped, is_async, refused

__all__ = ["BatchThreadWorkers", "BatchAsyncioWorkers", "batch_workers_for", "BatchFinished"]

_STOP: Any = object()
# what a worker reports of a batch's run: the messages it acknowledges, those that failed
# (with their errors), and the run's seconds (Settler.batch_finished)
BatchFinished = Callable[[list[Message], list[tuple[Message, BaseException | str]], float],
                         None]


def _report(batch: list[Message], error: BaseException | None, seconds: float,
            finished: BatchFinished) -> None:
    if error is None:
        finished(batch, [], seconds)
        return
    results = outcomes(batch, error)
    finished([m for m, failure in results if failure is None],
             [(m, failure) for m, failure in results if failure is not None], seconds)


class BatchThreadWorkers:
    """Threads running a plain batch handler; a call that returns an awaitable fails the
    batch with AwaitableReturned."""

    def __init__(self, handler: Callable[[list[Message]], Any], concurrency: int,
                 starts: Starts, finished: BatchFinished, topic: str, url: str,
                 room: BatchRoom):
        self.handler, self.concurrency, self.starts = handler, concurrency, starts
        self.finished, self.topic, self.url, self.room = finished, topic, url, room
        self._waiting: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        self.threads = [spawn(f"worker-{i}", self.topic, self._work)
                        for i in range(self.concurrency)]

    def submit(self, messages: list[Message]) -> None:
        """``messages``: one batch."""
        self._waiting.put(messages)

    def take_unstarted(self) -> list[Message]:
        unstarted: list[Message] = []
        batches = 0
        while True:
            try:
                item = self._waiting.get_nowait()
            except queue.Empty:
                break
            if item is not _STOP:
                unstarted += item
                batches += 1
        self.room.finished(batches)
        return unstarted

    def stop(self) -> None:
        for _ in self.threads:
            self._waiting.put(_STOP)

    def _work(self) -> None:
        allowed, handler = self.starts.allowed_of, self.handler
        while True:
            batch = self._waiting.get()
            if batch is _STOP:
                return
            run = allowed(batch)
            if run:
                began = time.perf_counter()
                error: BaseException | None = None
                try:
                    active = otel.tracer()
                    if active is None:
                        returned = handler(run)
                    else:
                        with otel.batch_span(active, run, self.url):
                            returned = handler(run)
                    if returned is not None and inspect.isawaitable(returned):
                        raise refused(handler, returned)
                except Exception as exc:  # noqa: BLE001 - any handler failure is a retry
                    error = exc
                _report(run, error, time.perf_counter() - began, self.finished)
            self.room.finished()


class BatchAsyncioWorkers:
    """Tasks on one event loop, in a thread of its own, running an ``async`` batch handler;
    ``cancel_superseded``: a call is cancelled once every message of its batch is told to
    stop (one that only some are told reads ``message.superseded`` per message)."""

    _loop: asyncio.AbstractEventLoop  # made by start()

    def __init__(self, handler: Callable[[list[Message]], Any], concurrency: int,
                 starts: Starts, finished: BatchFinished, topic: str, url: str,
                 room: BatchRoom, cancel_superseded: bool = False):
        self.handler, self.concurrency, self.starts = handler, concurrency, starts
        self.finished, self.topic, self.url, self.room = finished, topic, url, room
        if cancel_superseded:
            self.handler = partial(cancelled_when_stopped, handler)
        self._waiting: asyncio.Queue[list[Message]] = asyncio.Queue()
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        self._loop = asyncio.new_event_loop()
        self.threads = [spawn("async-workers", self.topic, self._serve)]

    def submit(self, messages: list[Message]) -> None:
        """``messages``: one batch."""
        self._loop.call_soon_threadsafe(self._waiting.put_nowait, messages)

    def take_unstarted(self) -> list[Message]:
        drained: list[list[Message]] = []

        def take() -> None:
            while not self._waiting.empty():
                drained.append(self._waiting.get_nowait())
            done.set()

        done = threading.Event()
        self._loop.call_soon_threadsafe(take)
        done.wait(timeout=5)
        self.room.finished(len(drained))
        return [message for batch in drained for message in batch]

    def stop(self) -> None:
        """The loop stops; tasks still inside the handler are cancelled."""
        self._loop.call_soon_threadsafe(self._loop.stop)

    def _serve(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)

        async def work() -> None:
            while True:
                batch = await self._waiting.get()
                run = self.starts.allowed_of(batch)
                if run:
                    began = time.perf_counter()
                    error: BaseException | None = None
                    try:
                        active = otel.tracer()
                        if active is None:
                            await self.handler(run)
                        else:
                            with otel.batch_span(active, run, self.url):
                                await self.handler(run)
                    except Exception as exc:  # noqa: BLE001 - any handler failure is a retry
                        error = exc
                    _report(run, error, time.perf_counter() - began, self.finished)
                self.room.finished()

        tasks = [loop.create_task(work()) for _ in range(self.concurrency)]
        loop.run_forever()
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.close()


BatchWorkers = BatchThreadWorkers | BatchAsyncioWorkers


def batch_workers_for(handler: Callable[[list[Message]], Any], concurrency: int,
                      starts: Starts, finished: BatchFinished, topic: str, url: str,
                      room: BatchRoom, cancel_superseded: bool = False) -> BatchWorkers:
    """Tasks on an event loop for an ``async`` handler, threads for a plain one;
    ``cancel_superseded`` (async only) as BatchAsyncioWorkers says."""
    if is_async(handler):
        return BatchAsyncioWorkers(handler, concurrency, starts, finished, topic, url, room,
                                   cancel_superseded)
    return BatchThreadWorkers(handler, concurrency, starts, finished, topic, url, room)
