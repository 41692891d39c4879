"""Deliveries told to stop, as this process has heard of them (SPEC §14, docs/semantics.md
"Supersede and cancel"): a send superseded them, or they were cancelled. A client's stop
watch (``client/stop_watch.py``) hears it on the topic's stop channel and marks them here;
``Message.superseded`` and ``Message.wait_superseded`` read it, and a consumer that cancels
superseded async handlers listens for it.

One board per process, whatever the client that claimed a delivery: a delivery is named by
topic, the topic's generation (a topic deleted and created again numbers its deliveries
anew), group, slot and seq. It keeps the newest ``CAPACITY`` marks (a delivery settles long
before that many others are told to stop). Hearing is best effort: Redis keeps the mark
that decides how the delivery settles, whatever this process heard.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable

__all__ = ["StopBoard", "BOARD", "Delivery", "Reason"]

Delivery = tuple[str, str, str, int, int]  # topic, generation, group, slot, seq
Reason = str  # "superseded" or "cancelled"
CAPACITY = 100_000


class StopBoard:
    """Marks of deliveries told to stop, and who waits for them."""

    def __init__(self, capacity: int = CAPACITY) -> None:
        self._capacity = capacity
        self._marks: OrderedDict[Delivery, Reason] = OrderedDict()
        self._changed = threading.Condition()
        self._listeners: dict[Delivery, list[Callable[[Reason], object]]] = {}

    def mark(self, topic: str, generation: str, group: str, slot: int, seqs: Iterable[int],
             reason: Reason) -> None:
        """These deliveries were told to stop: wake their waiters, call their listeners."""
        called: list[tuple[Callable[[Reason], object], Reason]] = []
        with self._changed:
            for seq in seqs:
                delivery = (topic, generation, group, slot, seq)
                self._marks[delivery] = reason
                called += [(listener, reason) for listener in
                           self._listeners.pop(delivery, ())]
            while len(self._marks) > self._capacity:
                self._marks.popitem(last=False)
            self._changed.notify_all()
        for listener, why in called:  # (outside the lock: a listener may take others)
            listener(why)

    def reason(self, delivery: Delivery) -> Reason | None:
        """Why the delivery was told to stop, or None if it was not (as heard here)."""
        return self._marks.get(delivery)

    def wait(self, delivery: Delivery, timeout: float | None) -> Reason | None:
        """Block until the delivery is told to stop, or ``timeout`` seconds pass (None:
        no limit); returns why, or None."""
        with self._changed:
            self._changed.wait_for(lambda: delivery in self._marks, timeout)
            return self._marks.get(delivery)

    def listen(self, delivery: Delivery, listener: Callable[[Reason], object]
               ) -> Callable[[], None]:
        """Call ``listener(reason)`` once when the delivery is told to stop (at once if it
        was); returns what stops listening."""
        with self._changed:
            reason = self._marks.get(delivery)
            if reason is None:
                self._listeners.setdefault(delivery, []).append(listener)
        if reason is not None:
            listener(reason)

        def stop_listening() -> None:
            with self._changed:
                listeners = self._listeners.get(delivery)
                if listeners and listener in listeners:
                    listeners.remove(listener)
                    if not listeners:
                        del self._listeners[delivery]

        return stop_listening

    def forget(self, deliveries: Iterable[Delivery]) -> None:
        """These deliveries settled: their marks are no longer needed."""
        with self._changed:
            for delivery in deliveries:
                self._marks.pop(delivery, None)


BOARD = StopBoard()
