"""Deliveries told to stop (SPEC §14 "Trust", docs/semantics.md "Supersede and cancel"): a
send superseded them, or they were cancelled. Only Redis decides it: the script that does
it marks the delivery in its group's ``running`` hash, and that mark decides how the
delivery settles. What a process hears on the topic's stop channel (``client/
stop_watch.py``) is a hint, since any client allowed to publish there can say anything:
this board acts on a hint only for a delivery this process asks about (its
``Message.superseded`` is read, or waited for, or a consumer listens to cancel its handler),
and only once Redis confirms the mark (the watch reads it, or a lease extension's reply
says so). It forgets a delivery when the delivery settles.

Each delivery asked about has a :class:`StopSignal` (as BullMQ hands each job an
AbortSignal), made when first asked for; hints heard of deliveries nobody asked about yet
are kept, newest ``HINTS`` of them, so that a handler that asks a moment later still
learns it (after the confirmation). Nothing here grows with the fleet's supersedes: only
with what this process holds and asks about.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

__all__ = ["StopBoard", "StopSignal", "BOARD", "Delivery", "Reason", "Confirmer"]

Delivery = tuple[str, str, str, int, int]  # topic, generation, group, slot, seq
Reason = str  # "superseded" or "cancelled"
REASONS = {"s": "superseded", "c": "cancelled"}  # a mark in `running` -> its reason
HINTS = 4096  # hints kept of deliveries nobody here asked about yet
SIGNALS = 100_000  # signals kept of deliveries asked about that never settled here
_CHUNK = 1000  # ids of one hint looked at per hold of the lock


class Confirmer(Protocol):
    """What reads Redis's marks: the stop watch of the client that heard the hint."""

    def marks(self, topic: str, group: str, slot: int, seqs: Sequence[int]
              ) -> list[Reason | None]:
        """The reason each delivery was told to stop, as Redis marks it; None where not."""
        ...


class StopSignal:
    """One delivery's stop state: why Redis told it to stop (None until it did), and who
    listens for it."""

    __slots__ = ("reason", "_listeners")

    def __init__(self) -> None:
        self.reason: Reason | None = None
        self._listeners: list[Callable[[Reason], object]] = []


class StopBoard:
    """The stop signals of the deliveries this process asks about, and the hints heard."""

    def __init__(self, hints: int = HINTS, signals: int = SIGNALS) -> None:
        self._hint_capacity, self._signal_capacity = hints, signals
        self._changed = threading.Condition()
        self._signals: dict[Delivery, StopSignal] = {}
        # a hint of a delivery nobody asked about: who can confirm it, or its confirmed
        # reason (a lease extension's reply)
        self._hints: dict[Delivery, Confirmer | Reason] = {}

    # -- what the stop watch and the lease extension say ------------------------------

    def hint(self, topic: str, generation: str, group: str, slot: int, seqs: Iterable[int],
             confirmer: Confirmer) -> None:
        """Heard on the stop channel: these deliveries may have been told to stop. Those
        asked about are confirmed with Redis at once (on the caller's thread); the others
        are kept for when they are asked about."""
        asked: list[int] = []
        seqs = list(seqs)
        for start in range(0, len(seqs), _CHUNK):
            with self._changed:
                for seq in seqs[start:start + _CHUNK]:
                    delivery = (topic, generation, group, slot, seq)
                    signal = self._signals.get(delivery)
                    if signal is None:
                        self._remember(delivery, confirmer)
                    elif signal.reason is None:
                        asked.append(seq)
        if asked:
            reasons = confirmer.marks(topic, group, slot, asked)
            for seq, reason in zip(asked, reasons, strict=True):
                if reason is not None:
                    self.confirmed((topic, generation, group, slot, seq), reason)

    def confirmed(self, delivery: Delivery, reason: Reason) -> None:
        """Redis says this delivery was told to stop: its signal fires (once)."""
        with self._changed:
            signal = self._signals.get(delivery)
            if signal is None:
                self._remember(delivery, reason)
                return
            if signal.reason is not None:
                return
            signal.reason = reason
            listeners, signal._listeners = signal._listeners, []
            self._changed.notify_all()
        for listener in listeners:  # (outside the lock: a listener may take others)
            listener(reason)

    def _remember(self, delivery: Delivery, hint: Confirmer | Reason) -> None:
        hints = self._hints
        if isinstance(hints.get(delivery), str):
            return  # confirmed already
        hints.pop(delivery, None)
        hints[delivery] = hint
        while len(hints) > self._hint_capacity:
            del hints[next(iter(hints))]

    # -- what a delivery's holder asks ----------------------------------------------

    def signal(self, delivery: Delivery) -> StopSignal:
        """The delivery's signal, made on first asking: a hint heard of it before is
        confirmed with Redis now (on the caller's thread, once)."""
        signal = self._signals.get(delivery)
        if signal is not None:
            return signal
        with self._changed:
            signal = self._signals.get(delivery)
            if signal is not None:
                return signal
            signal = self._signals[delivery] = StopSignal()
            while len(self._signals) > self._signal_capacity:
                del self._signals[next(iter(self._signals))]
            hint = self._hints.pop(delivery, None)
        if isinstance(hint, str):
            self.confirmed(delivery, hint)
        elif hint is not None:
            topic, _, group, slot, seq = delivery
            (reason,) = hint.marks(topic, group, slot, [seq])
            if reason is not None:
                self.confirmed(delivery, reason)
        return signal

    def wait(self, signal: StopSignal, timeout: float | None) -> Reason | None:
        """Block until the delivery of ``signal`` is told to stop, or ``timeout`` seconds
        pass (None: no limit); returns why, or None."""
        with self._changed:
            self._changed.wait_for(lambda: signal.reason is not None, timeout)
            return signal.reason

    def listen(self, signal: StopSignal, listener: Callable[[Reason], object]
               ) -> Callable[[], None]:
        """Call ``listener(reason)`` once when the delivery of ``signal`` is told to stop
        (at once if it was); returns what stops listening."""
        with self._changed:
            reason = signal.reason
            if reason is None:
                signal._listeners.append(listener)
        if reason is not None:
            listener(reason)

        def stop_listening() -> None:
            with self._changed:
                if listener in signal._listeners:
                    signal._listeners.remove(listener)

        return stop_listening

    def settled(self, deliveries: Iterable[Delivery]) -> None:
        """These deliveries settled: the board forgets their signals (a Message keeps its
        own) and hints."""
        if not self._signals and not self._hints:
            return
        with self._changed:
            for delivery in deliveries:
                self._signals.pop(delivery, None)
                self._hints.pop(delivery, None)

    def __len__(self) -> int:
        """Signals and hints held: what this board costs in memory."""
        return len(self._signals) + len(self._hints)


BOARD = StopBoard()
