"""Which batch consumer of a group gathers (docs/semantics.md, "Batch handlers"): one at a
time, so what a send costs the group's waiting consumers does not grow with their number.

A consumer waiting for its batch to fill reads what the group could claim whenever a key it
read is written (``ready_watch.py``): one script call per send and waiting consumer. So the
consumers of a group take turns: the *lead* is a lease, a string key of the topic
(``rmq:{t}:gather:g``, the holder's consumer id, expiring after ``lease`` seconds) taken
with ``SET NX`` and renewed by its holder every third of the lease. The others sleep on the
topic's wake channel and try again when it speaks or half a lease has passed. The leader
hands the lead on when it has no room for another batch (or stops): it deletes the key and
publishes on the wake channel, so a consumer with room takes over at once; a leader that
died unannounced is replaced once its lease lapses.

Plain commands only (no script): trying for the lead is one ``SET``; the leader renews its
lease with a ``GET`` (still its own?) and a ``PEXPIRE`` once a third of it passed. Giving it
up is a ``GET`` and an ``UNLINK``, not one atomic step: when the lease lapsed in between and
another consumer took it, that one is deleted too, and for a moment two consumers gather,
which costs looks, never a message (the lead only decides who looks; any consumer may
claim).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from ..storage.keys import RegistryKeys
from .error_map import map_errors

__all__ = ["GatherLead"]


class GatherLead:
    """The lead of gathering one group's batches, as one consumer (``holder``) sees it."""

    def __init__(self, redis: Any, topic: str, group: str, wake: Callable[[], None]):
        self.redis, self.wake = redis, wake
        self.key = RegistryKeys(topic).gather_lead(group)
        self._holder: str | None = None  # who this took the lead as (None: not leading)
        self._ask_at = 0.0  # while leading: when to renew the lease (time.monotonic())

    def take(self, holder: str, lease: float) -> bool:
        """True when ``holder`` leads now (taken, renewed, or held since less than a third
        of ``lease`` seconds); False when another consumer does."""
        now = time.monotonic()
        leading = self._holder == holder
        if leading and now < self._ask_at:
            return True
        ms = max(1, int(lease * 1000))
        with map_errors():
            if not self.redis.set(self.key, holder, nx=True, px=ms):
                held_by = self.redis.get(self.key) if leading else None
                if held_by is None or held_by.decode() != holder:
                    self._holder = None
                    return False
                self.redis.pexpire(self.key, ms)
        self._holder, self._ask_at = holder, now + lease / 3
        return True

    def hand_on(self) -> None:
        """Give the lead up, if held, and wake the group's other consumers to take it."""
        holder, self._holder = self._holder, None
        if holder is None:
            return
        with map_errors():
            held_by = self.redis.get(self.key)
            if held_by is not None and held_by.decode() == holder:
                self.redis.unlink(self.key)
        self.wake()
