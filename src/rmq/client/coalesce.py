"""Group commit for ``send``: single sends made at once share round trips.

A send made while another send of the same client is on the wire does not open a round trip
of its own: it queues its message (validated already) and waits. When the round trip in
flight returns, everything queued meanwhile goes out as one batch (one script call per topic
and slot, pipelined), and every sender gets its own result, or the batch's error. A lone
sender still makes one round trip per send; N senders at once make about one per N sends,
which lifts single sends past the round-trip rate of one connection (docs/benchmarks.md).

``SendCoalescer`` serves threads (``Client``): the first waiting thread carries the next
batch, so a lone thread never hands its send to another thread. ``AsyncSendCoalescer``
serves tasks (``AsyncClient``): carrier tasks run while anything is queued, two at most, so
that one batch can be prepared while the other is in Redis.
"""

from __future__ import annotations

import asyncio
import threading
from collections import defaultdict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import RMQError
from ..storage import queue as queue_ops
from ..storage.calls import Op, together
from ..storage.queue import Outgoing, TopicGone

__all__ = ["SendCoalescer", "AsyncSendCoalescer"]


@dataclass(slots=True, eq=False)  # tickets are told apart by identity, not by content
class _Ticket:
    topic: str
    generation: str
    groups: tuple[str, ...]
    message: Outgoing
    now: int
    heads: bool  # the topic keeps a heads index (queue.keeps_heads)
    done: threading.Event | None = None  # threads: None for the one carrying its own batch
    leads: bool = False  # threads: set when this waiting thread is to carry the next batch
    merged: bool = False
    error: BaseException | None = field(default=None, repr=False)

    def outcome(self) -> bool:
        if self.error is not None:
            raise self.error
        return self.merged


def _store(batch: list[_Ticket]) -> Op[None]:
    """Send the batch, one ``queue_ops.send`` per topic, all in one round trip; each ticket
    gets its ``merged``, or the TopicGone of its topic (the others are stored all the
    same)."""
    if len(batch) == 1:  # a lone sender: nothing to group
        return (yield from _store_topic(batch))
    by_topic: dict[tuple[str, str, tuple[str, ...], bool], list[_Ticket]] = defaultdict(list)
    for ticket in batch:
        by_topic[(ticket.topic, ticket.generation, ticket.groups, ticket.heads)].append(ticket)
    yield from together([_store_topic(tickets) for tickets in by_topic.values()])


def _store_topic(tickets: list[_Ticket]) -> Op[None]:
    """One ``queue_ops.send`` of tickets that share topic, generation, groups and index."""
    first = tickets[0]
    try:
        # One `now` per script call: the latest, so that every message in it is due by then.
        flags = yield from queue_ops.send(
            first.topic, first.generation, first.groups, [t.message for t in tickets],
            max(t.now for t in tickets), first.heads)
    except TopicGone as gone:
        for ticket in tickets:
            ticket.error = TopicGone(gone.topic, gone.stale)  # one each: raised apart
        return
    for ticket, flag in zip(tickets, flags, strict=True):
        ticket.merged = flag


class SendCoalescer:
    """Single sends from threads; ``run`` drives an operation to its value."""

    def __init__(self, run: Callable[[Op[Any]], Any]):
        self._run = run
        self._lock = threading.Lock()
        self._queued: list[_Ticket] = []
        self._busy = False

    def send(self, topic: str, generation: str, groups: tuple[str, ...], message: Outgoing,
             now: int, heads: bool) -> bool:
        """Store ``message``; returns whether it merged everywhere (as ``queue_ops.send``)."""
        ticket = _Ticket(topic, generation, groups, message, now, heads)
        with self._lock:
            if self._busy:
                ticket.done = threading.Event()
            self._busy = True
            self._queued.append(ticket)
        if ticket.done is not None:
            try:
                ticket.done.wait()
            except BaseException:  # interrupted (KeyboardInterrupt, a signal handler's error)
                self._abandon(ticket)
                raise
            if not ticket.leads:
                return ticket.outcome()
        self._carry(ticket)
        return ticket.outcome()

    def _abandon(self, ticket: _Ticket) -> None:
        # A sender that stops waiting must not take the next batch's carrier with it: the
        # threads queued behind it would wait forever.
        with self._lock:
            if ticket in self._queued:  # not yet carried: it will not be
                self._queued.remove(ticket)
                if ticket.leads:
                    self._hand_over()

    def _hand_over(self) -> None:
        # under the lock: the first queued thread carries the next batch, or nobody is busy
        if self._queued:
            following = self._queued[0]
            following.leads = True
            assert following.done is not None
            following.done.set()
        else:
            self._busy = False

    def _carry(self, own: _Ticket) -> None:
        with self._lock:
            batch, self._queued = self._queued, []
        try:
            self._run(_store(batch))
        except BaseException as exc:  # every waiting thread gets the error; none hangs
            # A KeyboardInterrupt or SystemExit belongs to this thread; the others get an
            # error of their own.
            shared = exc if isinstance(exc, Exception) else RMQError(
                f"the send was interrupted in the thread carrying it ({type(exc).__name__}); "
                "it may or may not have been stored")
            for ticket in batch:
                ticket.error = shared
            own.error = exc
        finally:
            for ticket in batch:
                if ticket.done is not None:
                    ticket.done.set()
            with self._lock:
                self._hand_over()


class AsyncSendCoalescer:
    """Single sends from asyncio tasks; ``run`` drives an operation to its value.

    Up to ``CARRIERS`` batches are on the wire at once (each on a connection of its own
    from the pool): while one batch is in Redis, the senders answered by the other prepare
    their next sends and leave as the next batch. With one carrier, the client and the
    server would take turns, each idle while the other works."""

    CARRIERS = 2

    def __init__(self, run: Callable[[Op[Any]], Awaitable[Any]]):
        self._run = run
        self._queued: list[tuple[_Ticket, asyncio.Future[bool]]] = []
        self._carriers: set[asyncio.Task[None]] = set()

    async def send(self, topic: str, generation: str, groups: tuple[str, ...],
                   message: Outgoing, now: int, heads: bool) -> bool:
        future: asyncio.Future[bool] = asyncio.get_running_loop().create_future()
        self._queued.append((_Ticket(topic, generation, groups, message, now, heads), future))
        if len(self._carriers) < self.CARRIERS:
            # It runs once the tasks ready now have run: the senders answered together
            # queue their next sends before it takes the queue, and leave together.
            self._carriers.add(asyncio.ensure_future(self._carry()))
        return await future

    async def _carry(self) -> None:
        # Until the queue is empty: a ticket queued while every carrier was busy is taken by
        # the first to come back. A carrier leaves the set in the same step in which it
        # finds the queue empty (not in a done callback, which runs later): a sender that
        # queues after that step starts a carrier of its own, one before it is carried.
        try:
            while self._queued:
                batch, self._queued = self._queued, []
                await self._carry_batch(batch)
        finally:
            self._carriers.discard(asyncio.current_task())

    async def _carry_batch(self, batch: list[tuple[_Ticket, asyncio.Future[bool]]]) -> None:
        try:
            await self._run(_store([ticket for ticket, _ in batch]))
        except BaseException as exc:  # noqa: BLE001 - handed to every sender
            for _, future in batch:
                if not future.done():  # a sender may have been cancelled
                    future.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        for ticket, future in batch:
            if future.done():
                continue
            if ticket.error is not None:
                future.set_exception(ticket.error)
            else:
                future.set_result(ticket.merged)
