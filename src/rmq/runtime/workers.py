"""Running the handler: ``concurrency`` threads for a plain function, or as many tasks on one
event loop (in a thread of its own) for an ``async`` one. Both take claimed messages through
``submit``, start only those still held whose lease has not (nearly) run out by the client's
clock, the server's (a consumer that wakes from a freeze must not run what another consumer
may have taken meanwhile: such a message goes to ``give_back``), report each outcome to
``finished`` with the run's duration (what the adaptive prefetch measures), and give back
what they have not started through ``take_unstarted``. With a tracer provider configured
(``rmq/otel.py``), each handler call runs in a consumer span naming the client's ``url``.
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
from ..errors import AwaitableReturned
from ..message import Message, stop_key
from .holdings import Holdings
from .threads import spawn

__all__ = ["Workers", "ThreadWorkers", "AsyncioWorkers", "Starts", "workers_for",
           "Superseded", "cancelled_when_stopped", "is_async", "refused"]

# what a worker reports of a run: (message, error or None, seconds); a batch handler's
# BatchFailed may give a message's error as a text
Finished = Callable[[tuple[Message, BaseException | str | None, float]], None]
_STOP: Any = object()


def is_async(handler: Callable[..., Any]) -> bool:
    """Whether a consumer awaits ``handler``: an ``async def`` function or method, an object
    whose ``__call__`` is one, or a ``functools.partial`` of either."""
    while isinstance(handler, partial):
        handler = handler.func
    return inspect.iscoroutinefunction(handler) or inspect.iscoroutinefunction(
        type(handler).__call__)


def refused(handler: Callable[..., Any], returned: Any) -> AwaitableReturned:
    """The error of a plain handler's call that returned an awaitable (``returned``), which
    nothing will await: the delivery fails with it. A coroutine is closed, so Python does not
    warn of it never awaited."""
    if inspect.iscoroutine(returned):
        returned.close()
    while isinstance(handler, partial):
        handler = handler.func
    return AwaitableReturned(handler, returned)


class Starts:
    """The check a worker makes just before it starts a message (the same for threads and
    tasks): still held, and with a third of its lease left at ``now()``. A message that
    fails the second half goes to ``give_back`` instead of the handler."""

    def __init__(self, holdings: Holdings, now: Callable[[], int],
                 give_back: Callable[[Message], None]):
        self.holdings, self.now, self.give_back = holdings, now, give_back

    def allowed_of(self, messages: list[Message]) -> list[Message]:
        """Those of ``messages`` (a batch) a worker may start, judged at one ``now()``; the
        others given back, or dropped when no longer held."""
        now, start_by, allowed = self.now(), self.holdings.start_by, []
        for message in messages:
            until = start_by(message)
            if until is None:
                continue
            if now <= until:
                allowed.append(message)
            else:
                self.give_back(message)
        return allowed

    def allowed(self, message: Message) -> bool:
        start_by = self.holdings.start_by(message)
        if start_by is None:
            return False  # its lease was lost while it waited: another consumer has it
        if self.now() <= start_by:
            return True
        self.give_back(message)
        return False


class ThreadWorkers:
    """Threads running a plain handler; a call that returns an awaitable fails with
    AwaitableReturned (nothing here would await it)."""

    def __init__(self, handler: Callable[[Message], Any], concurrency: int, starts: Starts,
                 finished: Finished, topic: str, url: str):
        self.handler, self.concurrency, self.starts = handler, concurrency, starts
        self.finished, self.topic, self.url = finished, topic, url
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
        unstarted: list[Message] = []
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
        # once a message: names bound here, not looked up on self each time
        get, allowed, handler, finished = (self._waiting.get, self.starts.allowed,
                                           self.handler, self.finished)
        clock = time.perf_counter
        while True:
            message = get()
            if message is _STOP:
                return
            if not allowed(message):
                continue
            began = clock()
            try:
                active = otel.tracer()
                if active is None:
                    returned = handler(message)
                else:
                    with otel.consumer_span(active, message, self.url):
                        returned = handler(message)
                if returned is not None and inspect.isawaitable(returned):
                    raise refused(handler, returned)
            except Exception as exc:  # noqa: BLE001 - any handler failure is a retry
                finished((message, exc, clock() - began))
            else:
                finished((message, None, clock() - began))


class AsyncioWorkers:
    """Tasks on one event loop, in a thread of its own, running an ``async`` handler;
    ``cancel_superseded``: each call in a task of its own, cancelled when its delivery is
    told to stop (rmq/stops.py), which then finishes as failed with :class:`Superseded`."""

    _loop: asyncio.AbstractEventLoop  # made by start(): a consumer never started owns none

    def __init__(self, handler: Callable[[Message], Any], concurrency: int, starts: Starts,
                 finished: Finished, topic: str, url: str, cancel_superseded: bool = False):
        self.handler, self.concurrency, self.starts = handler, concurrency, starts
        self.finished, self.topic, self.url = finished, topic, url
        if cancel_superseded:
            self.handler = partial(cancelled_when_stopped, handler)
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
                if not self.starts.allowed(message):
                    continue
                began = time.perf_counter()
                try:
                    active = otel.tracer()
                    if active is None:
                        await self.handler(message)
                    else:
                        with otel.consumer_span(active, message, self.url):
                            await self.handler(message)
                except Exception as exc:  # noqa: BLE001 - any handler failure is a retry
                    self.finished((message, exc, time.perf_counter() - began))
                else:
                    self.finished((message, None, time.perf_counter() - began))

        tasks = [loop.create_task(work()) for _ in range(self.concurrency)]
        loop.run_forever()
        for task in tasks:
            task.cancel()
        loop.run_until_complete(asyncio.gather(*tasks, return_exceptions=True))
        loop.close()


class Superseded(Exception):
    """A handler's task cancelled because its delivery was told to stop (its settle drops
    the delivery: Redis holds the mark)."""


async def cancelled_when_stopped(handler: Callable[[Any], Any],
                                 taken: Message | list[Message]) -> None:
    """``await handler(taken)`` (a message, or a batch of them), cancelled once every
    message of it is told to stop (rmq/stops.py): raises Superseded then."""
    loop = asyncio.get_running_loop()
    call = asyncio.ensure_future(handler(taken))
    messages = taken if isinstance(taken, list) else [taken]
    told = set()

    def hearing(message: Message) -> Callable[[str], None]:
        def heard(_: str) -> None:  # (on the stop watch's thread)
            told.add(stop_key(message))
            if len(told) == len(messages):
                loop.call_soon_threadsafe(call.cancel)
        return heard

    stops = [m.listen_stopped(hearing(m)) for m in messages]
    try:
        await call
    except asyncio.CancelledError:
        this = asyncio.current_task()
        if call.cancelled() and len(told) == len(messages) and not (
                this and this.cancelling()):
            raise Superseded(f"cancelled: {messages[0].stop_reason}") from None
        raise  # the consumer stops
    finally:
        for stop_listening in stops:
            stop_listening()


Workers = ThreadWorkers | AsyncioWorkers


def workers_for(handler: Callable[[Message], Any], concurrency: int, starts: Starts,
                finished: Finished, topic: str, url: str,
                cancel_superseded: bool = False) -> Workers:
    """Tasks on an event loop for an ``async`` handler, threads for a plain one; ``url``:
    the client's, which their spans name. ``cancel_superseded`` (async only): cancel a
    call whose delivery is told to stop."""
    if is_async(handler):
        return AsyncioWorkers(handler, concurrency, starts, finished, topic, url,
                              cancel_superseded)
    return ThreadWorkers(handler, concurrency, starts, finished, topic, url)
