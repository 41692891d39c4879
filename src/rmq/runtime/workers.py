"""Running the handler: ``concurrency`` threads for a plain function, or as many tasks on one
event loop (in a thread of its own) for an ``async`` one. Both take claimed messages through
``submit``, start only those still held (a message whose lease was lost meanwhile belongs to
another consumer now), report each outcome to ``finished``, and give back what they have not
started through ``take_unstarted``.
"""

from __future__ import annotations

import asyncio
import inspect
import queue
import threading
from collections.abc import Callable
from typing import Any

from ..message import Message
from .holdings import Holdings
from .threads import spawn

__all__ = ["Workers", "ThreadWorkers", "AsyncioWorkers", "workers_for"]

Finished = Callable[[Message, BaseException | None], None]
_STOP: Any = object()


class ThreadWorkers:
    """Threads running a plain handler."""

    def __init__(self, handler: Callable[[Message], Any], concurrency: int, holdings: Holdings,
                 finished: Finished, topic: str):
        self.handler, self.concurrency, self.holdings = handler, concurrency, holdings
        self.finished, self.topic = finished, topic
        # SimpleQueue: a put or get costs a fraction of queue.Queue's (no Condition in Python)
        self._waiting: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        self.threads = [spawn(f"worker-{i}", self.topic, self._work)
                        for i in range(self.concurrency)]

    def submit(self, messages: list[Message]) -> None:
        for message in messages:
            self._waiting.put(message)

    def take_unstarted(self) -> list[Message]:
        unstarted = []
        while True:
            try:
                item = self._waiting.get_nowait()
            except queue.Empty:
                return unstarted
            if item is not _STOP:
                unstarted.append(item)

    def stop(self) -> None:
        """Each worker exits when it takes the stop from the queue (after its handler)."""
        for _ in self.threads:
            self._waiting.put(_STOP)

    def _work(self) -> None:
        while True:
            message = self._waiting.get()
            if message is _STOP:
                return
            if not self.holdings.holds(message):
                continue  # its lease was lost while it waited: another consumer has it
            try:
                self.handler(message)
            except Exception as exc:  # noqa: BLE001 - any handler failure is a retry
                self.finished(message, exc)
            else:
                self.finished(message, None)


class AsyncioWorkers:
    """Tasks on one event loop, in a thread of its own, running an ``async`` handler."""

    _loop: asyncio.AbstractEventLoop  # made by start(): a consumer never started owns none

    def __init__(self, handler: Callable[[Message], Any], concurrency: int, holdings: Holdings,
                 finished: Finished, topic: str):
        self.handler, self.concurrency, self.holdings = handler, concurrency, holdings
        self.finished, self.topic = finished, topic
        self._waiting: asyncio.Queue[Message] = asyncio.Queue()
        self.threads: list[threading.Thread] = []

    def start(self) -> None:
        self._loop = asyncio.new_event_loop()
        self.threads = [spawn("async-workers", self.topic, self._serve)]

    def submit(self, messages: list[Message]) -> None:
        # one wake-up of the event loop per claim, not one per message
        self._loop.call_soon_threadsafe(self._queue_all, messages)

    def _queue_all(self, messages: list[Message]) -> None:
        for message in messages:
            self._waiting.put_nowait(message)

    def take_unstarted(self) -> list[Message]:
        drained: list[Message] = []

        def take() -> None:
            while not self._waiting.empty():
                drained.append(self._waiting.get_nowait())
            done.set()

        done = threading.Event()
        self._loop.call_soon_threadsafe(take)
        done.wait(timeout=5)
        return drained

    def stop(self) -> None:
        """The loop stops; tasks still inside the handler are cancelled."""
        self._loop.call_soon_threadsafe(self._loop.stop)

    def _serve(self) -> None:
        loop = self._loop
        asyncio.set_event_loop(loop)

        async def work() -> None:
            while True:
                message = await self._waiting.get()
                if not self.holdings.holds(message):
                    continue  # its lease was lost while it waited: another consumer has it
                try:
                    await self.handler(message)
                except Exception as exc:  # noqa: BLE001 - any handler failure is a retry
                    self.finished(message, exc)
                else:
                    self.finished(message, None)

        tasks = [loop.create_task(work()) for _ in range(self.concurrency)]
        loop.run_forever()
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.close()


Workers = ThreadWorkers | AsyncioWorkers


def workers_for(handler: Callable[[Message], Any], concurrency: int, holdings: Holdings,
                finished: Finished, topic: str) -> Workers:
    """Tasks on an event loop for an ``async`` handler, threads for a plain one."""
    kind = AsyncioWorkers if inspect.iscoroutinefunction(handler) else ThreadWorkers
    return kind(handler, concurrency, holdings, finished, topic)
