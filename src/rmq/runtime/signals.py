"""Running consumers in the foreground until SIGINT or SIGTERM."""

from __future__ import annotations

import signal
import threading
from collections.abc import Sequence
from typing import Any, Protocol

__all__ = ["run_all", "Runnable"]


class Runnable(Protocol):
    """What ``run_all`` runs: a :class:`~rmq.runtime.consumer.Consumer`."""

    @property
    def running(self) -> bool: ...

    def start(self) -> Any: ...

    def stop(self) -> None: ...


def run_all(consumers: Sequence[Runnable]) -> None:
    """Start ``consumers`` and block until SIGINT or SIGTERM (or until one stops), then stop
    them all gracefully."""
    stop = threading.Event()
    previous = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGINT, signal.SIGTERM):
            previous[sig] = signal.signal(sig, lambda *_: stop.set())
    try:
        for consumer in consumers:
            consumer.start()
        while not stop.is_set() and all(c.running for c in consumers):
            stop.wait(0.5)
    finally:
        for consumer in consumers:
            consumer.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
