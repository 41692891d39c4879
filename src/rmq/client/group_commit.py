"""Group commit: single sends made at once share round trips, where batches are executed.

A single send's flow yields its one enqueue call like any other round trip; the call says
it may join others (``Call.joins``). Such a call made while another of the same client is
on the wire does not open a round trip of its own: it queues and waits. When the round trip
in flight returns, everything queued meanwhile goes out as one batch (``storage.send.join``:
one script call per topic and slot, pipelined), and every sender gets its own reply, or the
batch's error. A lone sender still makes one round trip per send; N senders at once make
about one per N sends, which lifts single sends past the round-trip rate of one connection
(docs/benchmarks.md). Every other batch goes straight to the executor.

:class:`GroupCommit` serves threads (``Client``): the first waiting thread carries the next
batch, so a lone thread never hands its send to another thread. :class:`AsyncGroupCommit`
serves tasks (``AsyncClient``): carrier tasks run while anything is queued, two at most, so
that one batch can be prepared while the other is in Redis.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import RMQError
from ..storage.calls import Call, Op
from ..storage.queue import join
from .replication import BatchNotReplicated

__all__ = ["GroupCommit", "AsyncGroupCommit"]


@dataclass(slots=True, eq=False)  # tickets are told apart by identity, not by content
class _Ticket:
    calls: list[Call]
    done: threading.Event | None = None  # threads: None for the one carrying its own batch
    leads: bool = False  # threads: set when this waiting thread is to carry the next batch
    replies: list[Any] | None = None
    error: BaseException | None = field(default=None, repr=False)

    def outcome(self) -> list[Any]:
        if self.error is not None:
            raise self.error
        assert self.replies is not None
        return self.replies


_Join = Op[list[list[Any]]]


def _joined(batches: list[list[Call]]) -> tuple[list[Call], _Join | None]:
    """The senders' calls as one batch, and the join to hand its replies to (None: a lone
    sender's)."""
    if len(batches) == 1:
        return batches[0], None
    op = join(batches)
    return next(op), op


def _answers(op: _Join | None, replies: list[Any]) -> list[list[Any]]:
    """Each ticket's replies, in batch order."""
    if op is None:
        return [replies]
    try:
        op.send(replies)
    except StopIteration as done:
        answers: list[list[Any]] = done.value
        return answers
    raise AssertionError("a join takes one round trip")


def _unreplicated(op: _Join | None, short: BatchNotReplicated) -> list[BatchNotReplicated]:
    """Each sender's share of a batch fewer replicas than asked acknowledged: the same
    error, carrying that sender's own replies (``replication.py``: its operation goes on,
    then raises it)."""
    shares = []
    for replies in _answers(op, short.replies):
        share = BatchNotReplicated(str(short), acknowledged=short.acknowledged,
                                   wanted=short.wanted, local_fsync=short.local_fsync)
        share.replies = replies
        shares.append(share)
    return shares


class GroupCommit:
    """Batches of calls from threads, executed by ``execute``; joinable ones group-commit."""

    def __init__(self, execute: Callable[[list[Call]], list[Any]]):
        self._execute = execute
        self._lock = threading.Lock()
        self._queued: list[_Ticket] = []
        self._busy = False

    def __call__(self, calls: list[Call]) -> list[Any]:
        if not calls[0].joins:
            return self._execute(calls)
        ticket = _Ticket(calls)
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
            calls, op = _joined([ticket.calls for ticket in batch])
            try:
                answers = _answers(op, self._execute(calls))
            except BatchNotReplicated as short:
                for ticket, share in zip(batch, _unreplicated(op, short), strict=True):
                    ticket.error = share
                return
            for ticket, replies in zip(batch, answers, strict=True):
                ticket.replies = replies
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


class AsyncGroupCommit:
    """Batches of calls from asyncio tasks, executed by ``execute``; joinable ones
    group-commit.

    Up to ``CARRIERS`` batches are on the wire at once (each on a connection of its own
    from the pool): while one batch is in Redis, the senders answered by the other prepare
    their next sends and leave as the next batch. With one carrier, the client and the
    server would take turns, each idle while the other works."""

    CARRIERS = 2

    def __init__(self, execute: Callable[[list[Call]], Awaitable[list[Any]]]):
        self._execute = execute
        self._queued: list[tuple[list[Call], asyncio.Future[list[Any]]]] = []
        self._carriers: set[asyncio.Task[None]] = set()

    def __call__(self, calls: list[Call]) -> Awaitable[list[Any]]:
        # Not a coroutine itself: a batch that does not join is the executor's awaitable.
        if not calls[0].joins:
            return self._execute(calls)
        future: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()
        self._queued.append((calls, future))
        if len(self._carriers) < self.CARRIERS:
            # It runs once the tasks ready now have run: the senders answered together
            # queue their next sends before it takes the queue, and leave together.
            self._carriers.add(asyncio.ensure_future(self._carry()))
        return future

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

    async def _carry_batch(self, batch: list[tuple[list[Call], asyncio.Future[list[Any]]]]
                           ) -> None:
        try:
            calls, op = _joined([sent for sent, _ in batch])
            try:
                answers = _answers(op, await self._execute(calls))
            except BatchNotReplicated as short:
                for (_, future), share in zip(batch, _unreplicated(op, short), strict=True):
                    if not future.done():
                        future.set_exception(share)
                return
        except BaseException as exc:  # noqa: BLE001 - handed to every sender
            for _, future in batch:
                if not future.done():  # a sender may have been cancelled
                    future.set_exception(exc)
            if isinstance(exc, asyncio.CancelledError):
                raise
            return
        for (_, future), replies in zip(batch, answers, strict=True):
            if not future.done():
                future.set_result(replies)
