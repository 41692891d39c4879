"""The check-back (SPEC §12, docs/transactions.md): a thread per ``@client.checker(topic)``
in every process that runs the runtime, asking the application about the topic's
transactions left open ``check_after`` seconds after their last half send. The lease of each
check is taken in Redis (``client.check_transaction``), so however many processes take part,
one checker at a time asks about a transaction.

Timing: a look at the open transactions finds when each is due (``check_due_at``), and the
thread sleeps until the earliest. A transaction opened after a look is only seen at the next
one, so looks are at most half of ``check_after`` apart: every transaction is seen before it
is due, and asked on time. After it asked, the thread looks again at once, since a check
moved the transaction's due time (``check_interval`` after an unknown answer)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from .threads import guarded, log, spawn

__all__ = ["CheckBack", "TransactionClient", "SCAN_MAX"]

SCAN_MAX = 5.0  # seconds between two looks at a topic's open transactions, at most
SCAN_MIN = 0.02  # and at least (a look right after a check waits this long)


class OpenTransactionView(Protocol):
    @property
    def id(self) -> str: ...

    @property
    def check_due_at(self) -> int: ...

    @property
    def closing(self) -> str | None: ...


class TopicSettingsView(Protocol):
    @property
    def check_after(self) -> float: ...


class TopicView(Protocol):
    @property
    def settings(self) -> TopicSettingsView: ...


class TransactionClient(Protocol):
    """The client methods the check-back calls (see :class:`rmq.Client`)."""

    def now(self) -> int: ...

    def topic(self, name: str) -> TopicView: ...

    def open_transactions(self, topic: str) -> Sequence[OpenTransactionView]: ...

    def check_transaction(self, topic: str, tx_id: str,
                          checker: Callable[[str], Any]) -> str: ...


class CheckBack:
    """Checks a topic's open transactions with ``checker`` until stopped."""

    def __init__(self, client: TransactionClient, topic: str, checker: Callable[[str], Any]):
        self.client = client
        self.topic = topic
        self.checker = checker
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.outcomes: dict[str, int] = {}  # what the checks did, counted (for tests, logs)

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def start(self) -> CheckBack:
        self._stop.clear()
        self._thread = spawn("checker", self.topic, self._loop)
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            wait = guarded(f"check-back of {self.topic!r}", self.check_due)
            self._stop.wait(SCAN_MAX if wait is None else wait)

    def check_due(self) -> float:
        """Check every transaction due now; returns how long to wait before looking again:
        until the next one is due, at most half of ``check_after`` (a transaction opened
        meanwhile is seen before it is due), and hardly at all after a check."""
        look = min(SCAN_MAX, self.client.topic(self.topic).settings.check_after / 2)
        now = self.client.now()
        next_due = now + int(look * 1000)
        for tx in self.client.open_transactions(self.topic):
            if self._stop.is_set():
                break
            if tx.closing is None and tx.check_due_at > now:
                next_due = min(next_due, tx.check_due_at)
                continue
            outcome = self.client.check_transaction(self.topic, tx.id, self.checker)
            self.outcomes[outcome] = self.outcomes.get(outcome, 0) + 1
            log.debug("check-back of transaction %r of topic %r: %s", tx.id, self.topic,
                      outcome)
            next_due = now  # the check moved its due time: look again to learn it
        return max(SCAN_MIN, min(look, (next_due - self.client.now()) / 1000))
