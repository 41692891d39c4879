"""The transaction handles users hold (``client.transaction(topic)``), and the transaction
methods of both clients: ``transaction``, ``checker``, ``open_transactions`` and
``check_transaction`` (SPEC §12, docs/transactions.md). Each method runs a flow of
``transactions.TransactionFlows``; the sync and async handles differ only in the runner
they were given (their client's ``_run``)."""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable, Mapping
from types import TracebackType
from typing import Any, TypeVar

from ..message import SendCounts
from ..properties import PropertyValue
from ..runtime.checker import CheckBack
from ..storage.transactions import OpenTransaction
from .host import AsyncHost, AsyncRunner, Runner, SyncHost
from .outgoing import MISSING
from .transactions import CheckStep, TransactionFlows, TxState, send_item

__all__ = ["Transaction", "AsyncTransaction", "TransactionMethods", "AsyncTransactionMethods",
           "Checker"]

T = TypeVar("T")
log = logging.getLogger("rmq.transactions")
# fn(tx_id) -> True (commit), False (roll back), None (unknown); may be async
Checker = Callable[[str], "bool | None | Awaitable[bool | None]"]
C = TypeVar("C", bound=Callable[..., Any])


def _answer(tx_id: str, answer: object) -> bool | None:
    if answer is None or isinstance(answer, bool):
        return answer
    log.warning("checker of transaction %r answered %r, not True, False or None: asking "
                "again later", tx_id, answer)
    return None


class _Handle:
    """What both handles hold: the transaction's flows (their client's) and state."""

    def __init__(self, flows: TransactionFlows, state: TxState):
        self._flows = flows
        self._state = state

    @property
    def id(self) -> str:
        """The transaction id (given, or generated): what a checker is asked about."""
        return self._state.id

    @property
    def state(self) -> str:
        """"open", "committed" or "rolled_back", as this handle knows it."""
        return self._state.state


class Transaction(_Handle):
    """A transaction of one topic (``client.transaction(topic, id=None)``): its sends are
    half messages, invisible to every group, until ``commit``; ``rollback`` drops them. As
    a context manager it commits on a normal exit and rolls back on an exception."""

    def __init__(self, run: Runner, flows: TransactionFlows, state: TxState):
        super().__init__(flows, state)
        self._run = run

    def send(self, body: Any = MISSING, *, json: Any = MISSING, priority: int | None = None,
             delay_ms: float | None = None, deliver_at: Any = None,
             slot_basis: bytes | str | None = None, key: bytes | str | None = None,
             tag: str | None = None,
             properties: Mapping[str, PropertyValue] | None = None,
             version: int | None = None) -> int:
        """Store one half message (``send``'s arguments; a delay counts from the commit).
        Returns 1, or 0 when this part stored it before. Raises TransactionClosed once
        the transaction is closed."""
        item = send_item(body, json, {"priority": priority, "delay_ms": delay_ms,
                                      "deliver_at": deliver_at, "slot_basis": slot_basis,
                                      "key": key, "tag": tag, "properties": properties,
                                      "version": version})
        return self._run(self._flows._tx_send(self._state, [item], True))

    def send_many(self, items: Iterable[Any]) -> int:
        """Store a batch of half messages (``send_many``'s items), validated whole first:
        one script call per slot. Returns how many were stored."""
        return self._run(self._flows._tx_send(self._state, items, False))

    def commit(self) -> SendCounts:
        """Make every half message pending at once, as sends now (merging, filters, delays
        from now): one atomic, idempotent script call per slot. Returns what it sent and
        merged (0, 0 when committed before); after a rollback raises TransactionClosed."""
        return self._run(self._flows._tx_close(self._state, True))

    def rollback(self) -> None:
        """Drop every half message; idempotent; after a commit raises TransactionClosed."""
        self._run(self._flows._tx_close(self._state, False))

    def __enter__(self) -> Transaction:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        if kind is not None:
            if self._state.state == "open":
                self.rollback()
        elif self._state.state == "open":
            self.commit()


class AsyncTransaction(_Handle):
    """:class:`Transaction` for ``AsyncClient``: the same methods, awaited; ``async with``."""

    def __init__(self, run: AsyncRunner, flows: TransactionFlows, state: TxState):
        super().__init__(flows, state)
        self._run = run

    async def send(self, body: Any = MISSING, *, json: Any = MISSING,
                   priority: int | None = None, delay_ms: float | None = None,
                   deliver_at: Any = None, slot_basis: bytes | str | None = None,
                   key: bytes | str | None = None, tag: str | None = None,
                   properties: Mapping[str, PropertyValue] | None = None,
                   version: int | None = None) -> int:
        item = send_item(body, json, {"priority": priority, "delay_ms": delay_ms,
                                      "deliver_at": deliver_at, "slot_basis": slot_basis,
                                      "key": key, "tag": tag, "properties": properties,
                                      "version": version})
        return await self._run(self._flows._tx_send(self._state, [item], True))

    async def send_many(self, items: Iterable[Any]) -> int:
        return await self._run(self._flows._tx_send(self._state, items, False))

    async def commit(self) -> SendCounts:
        return await self._run(self._flows._tx_close(self._state, True))

    async def rollback(self) -> None:
        await self._run(self._flows._tx_close(self._state, False))

    async def __aenter__(self) -> AsyncTransaction:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, error: BaseException | None,
                        trace: TracebackType | None) -> None:
        if self._state.state != "open":
            return
        if kind is not None:
            await self.rollback()
        else:
            await self.commit()


class TransactionMethods(TransactionFlows, SyncHost):
    """``rmq.Client``'s transaction methods."""

    def transaction(self, topic: str, id: str | None = None, *,
                    part: str | None = None) -> Transaction:
        """A transaction of ``topic`` (SPEC §12): ``id`` given (1-128 name characters) or
        generated. Beginning costs nothing: the first half send registers it. ``part``
        names this handle's share (default: its own); a handle of the same id and part
        that sends the same messages again, in the same order, stores nothing twice (how
        Spark's re-run of a batch publishes once)."""
        return Transaction(self._run, self, self._new_transaction(topic, id, part))

    def checker(self, topic: str) -> Callable[[C], C]:
        """Decorator: ``@client.checker(topic)`` registers ``fn(tx_id) -> True | False |
        None`` (commit, roll back, unknown): ``client.run()`` asks it about the topic's
        transactions left open ``check_after`` seconds after their last half send. The
        function itself is returned unchanged; its ``check_back`` attribute is the
        :class:`~rmq.runtime.checker.CheckBack` that runs it (``start()``, ``stop()``)."""

        def register(function: C) -> C:
            self._new_transaction(topic, None, None)  # checks the topic's name
            back = CheckBack(self, topic, function)
            # The documented attribute on the user's function, which its type cannot declare.
            function.check_back = back  # type: ignore[attr-defined]
            self._check_backs.append(back)
            return function

        return register

    def open_transactions(self, topic: str) -> list[OpenTransaction]:
        """The topic's open transactions, oldest first, with their slots, half messages,
        age and checks so far."""
        return self._run(self._open_transactions(topic))

    def check_transaction(self, topic: str, tx_id: str, checker: Checker) -> str:
        """One check-back of ``tx_id`` (what the runtime does for a transaction due for a
        check): take the check's lease, ask ``checker`` if the transaction is still open,
        and act. Returns "committed", "rolled_back", "unknown", "abandoned", "busy"
        (another process checks it, or its interval has not passed) or "closed"."""
        try:
            self._run(self._check_begin(topic, tx_id))
        except CheckStep as step:
            return step.outcome
        try:
            answer = checker(tx_id)
            if inspect.isawaitable(answer):
                answer = asyncio.run(_awaited(answer))
        except Exception:
            log.exception("checker of transaction %r of topic %r failed: asking again later",
                          tx_id, topic)
            answer = None
        return self._run(self._check_end(topic, tx_id, _answer(tx_id, answer)))


class AsyncTransactionMethods(TransactionFlows, AsyncHost):
    """``rmq.AsyncClient``'s transaction methods (see :class:`TransactionMethods`)."""

    def transaction(self, topic: str, id: str | None = None, *,
                    part: str | None = None) -> AsyncTransaction:
        return AsyncTransaction(self._run, self, self._new_transaction(topic, id, part))

    def checker(self, topic: str) -> Callable[[C], C]:
        def register(function: C) -> C:
            self._new_transaction(topic, None, None)
            self._checkers.append((topic, function))
            return function

        return register

    async def open_transactions(self, topic: str) -> list[OpenTransaction]:
        return await self._run(self._open_transactions(topic))

    async def check_transaction(self, topic: str, tx_id: str, checker: Checker) -> str:
        try:
            await self._run(self._check_begin(topic, tx_id))
        except CheckStep as step:
            return step.outcome
        try:
            answer = checker(tx_id)
            if inspect.isawaitable(answer):
                answer = await answer
        except Exception:
            log.exception("checker of transaction %r of topic %r failed: asking again later",
                          tx_id, topic)
            answer = None
        return await self._run(self._check_end(topic, tx_id, _answer(tx_id, answer)))


async def _awaited(answer: Awaitable[T]) -> T:
    return await answer
