"""The messages a consumer holds (claimed, not yet settled) and the room its prefetch leaves.

Every part of the runtime consults it: the fetcher claims only what its prefetch
(``prefetch.py``) wants for what is held, a worker
starts only a message still held whose lease has not (nearly) run out, the settler forgets
what it settles, the keeper extends the leases of what is held (and records their new
ends), and ``stop`` waits for it to empty.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from ..message import Message
from .prefetch import Prefetch

__all__ = ["Holdings"]


class Holdings:
    """Held messages by (generation, slot, seq) (a topic deleted and created again hands out
    the same slot and seq again), under one condition that signals freed room; and for
    each one the time by which a worker may still start it (below, ``start_by``), in ms of
    the client's clock (the server's)."""

    def __init__(self) -> None:
        self._held: dict[tuple[str, int, int], Message] = {}
        self._start_by: dict[tuple[str, int, int], float] = {}  # the same keys as _held
        self._changed = threading.Condition()

    def __len__(self) -> int:
        return len(self._held)

    def add(self, messages: Iterable[Message], now: int) -> None:
        """Hold ``messages``, claimed at ``now`` (their leases end at ``lease_until``)."""
        held, start_by = self._held, self._start_by
        with self._changed:
            for message in messages:
                key = (message.generation, message.slot, message.seq)
                held[key] = message
                until = message.lease_until
                start_by[key] = until - (until - now) / 3

    def holds(self, message: Message) -> bool:
        return (message.generation, message.slot, message.seq) in self._held

    def extended(self, messages: Iterable[Message], until: int, length: int) -> None:
        """The leases of ``messages`` now end at ``until`` (at least) and last ``length``."""
        with self._changed:
            for message in messages:
                key = (message.generation, message.slot, message.seq)
                if key in self._held:
                    self._start_by[key] = until - length / 3

    def start_by(self, message: Message) -> float | None:
        """The time by which a worker may still start ``message`` (None: not held): while
        its lease has at least a third of its length left. The keeper extends every third
        of a lease, so a live consumer's leases always have two thirds left; less means
        extensions were missed (the consumer was frozen or cut off) and the lease has run
        out, or may before the next one. One look-up: workers ask it once a message."""
        return self._start_by.get((message.generation, message.slot, message.seq))

    def forget(self, messages: Iterable[Message]) -> None:
        held, start_by = self._held, self._start_by
        with self._changed:
            for message in messages:
                key = (message.generation, message.slot, message.seq)
                if held.pop(key, None) is not None:
                    del start_by[key]
            self._changed.notify_all()

    def all(self) -> list[Message]:
        with self._changed:
            return list(self._held.values())

    def room(self, prefetch: Prefetch, running: threading.Event) -> int:
        """Wait until ``prefetch`` wants to claim (or ``running`` clears); return how many.
        Claiming many at once costs Redis far less than one by one."""
        with self._changed:
            wanted = prefetch.wanted(len(self._held))
            while running.is_set() and not wanted:
                self._changed.wait(timeout=1.0)
                wanted = prefetch.wanted(len(self._held))
            return wanted

    def wait_empty(self, deadline: float) -> bool:
        """Wait until nothing is held or the monotonic ``deadline`` passes; True if empty."""
        with self._changed:
            while self._held and time.monotonic() < deadline:
                self._changed.wait(timeout=max(0.0, deadline - time.monotonic()))
            return not self._held

    def wake_all(self) -> None:
        """Wake whoever waits for room (to see that the consumer stops)."""
        with self._changed:
            self._changed.notify_all()
