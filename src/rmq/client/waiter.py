"""Sleeping until there is work: a pub/sub subscription to a topic's wake channel.

The scripts publish on the channel only when a sleeping consumer has something new to do
(work became ready where there was none, an earlier due time, a released key), so the
channel is quiet under load and a consumer never polls while idle.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Any

from ..storage.keys import wake_channel
from .connection import map_errors

__all__ = ["Waiter"]


class Waiter:
    """A subscription to one topic's wake channel. ``wait`` is safe from one thread at a
    time; the lock makes concurrent waiters take turns."""

    def __init__(self, client: Any, topic: str):
        self._pubsub = client.pubsub(ignore_subscribe_messages=True)
        self._lock = threading.Lock()
        with map_errors():
            self._pubsub.subscribe(wake_channel(topic))
            # Wait for the subscription to be confirmed: only then is no publish missed.
            self._pubsub.get_message(timeout=1.0, ignore_subscribe_messages=False)

    def wait(self, timeout: float) -> bool:
        """Sleep until woken or ``timeout`` seconds pass; True when woken."""
        with self._lock, map_errors():
            woke = self._pubsub.get_message(timeout=max(0.0, timeout)) is not None
            self.drain()
            return woke

    def drain(self) -> None:
        """Forget wake-ups already received (the caller is about to look for work anyway)."""
        with map_errors():
            while self._pubsub.get_message(timeout=0.0) is not None:
                pass

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a broken connection is not an error
            self._pubsub.close()
