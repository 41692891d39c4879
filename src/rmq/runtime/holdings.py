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
    """Held messages by (slot, seq), under one condition that signals freed room; and each
    one's lease as (end, length), in ms of the client's clock (the server's)."""

    def __init__(self) -> None:
        self._held: dict[tuple[int, int], Message] = {}
        self._leases: dict[tuple[int, int], tuple[int, int]] = {}
        self._changed = threading.Condition()

    def __len__(self) -> int:
        return len(self._held)

    def add(self, messages: Iterable[Message], now: int) -> None:
        """Hold ``messages``, claimed at ``now`` (their leases end at ``lease_until``)."""
        with self._changed:
            for message in messages:
                key = (message.slot, message.seq)
                self._held[key] = message
                self._leases[key] = (message.lease_until, message.lease_until - now)

    def holds(self, message: Message) -> bool:
        return (message.slot, message.seq) in self._held

    def extended(self, messages: Iterable[Message], until: int, length: int) -> None:
        """The leases of ``messages`` now end at ``until`` (at least) and last ``length``."""
        with self._changed:
            for message in messages:
                key = (message.slot, message.seq)
                if key in self._held:
                    self._leases[key] = (until, length)

    def lease_lasts(self, message: Message, now: int) -> bool:
        """Whether the lease of a held ``message`` has at least a third of its length left
        at ``now``. The keeper extends every third of a lease, so a live consumer's leases
        always have two thirds left; less means extensions were missed (the consumer was
        frozen or cut off) and the lease has run out, or may before the next one."""
        until, length = self._leases.get((message.slot, message.seq), (0, 0))
        return until - now >= length / 3

    def forget(self, messages: Iterable[Message]) -> None:
        with self._changed:
            for message in messages:
                key = (message.slot, message.seq)
                self._held.pop(key, None)
                self._leases.pop(key, None)
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
