"""Running consumers in the foreground until SIGINT or SIGTERM."""

from __future__ import annotations

import signal
import threading
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .consumer import Consumer

__all__ = ["run_all"]


def run_all(consumers: list[Consumer]) -> None:
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
