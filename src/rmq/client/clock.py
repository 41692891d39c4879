"""Where a client's time comes from."""

from __future__ import annotations

import time
from collections.abc import Callable

__all__ = ["Clock", "system_clock"]

Clock = Callable[[], int]  # epoch milliseconds


def system_clock() -> int:
    """Wall-clock epoch milliseconds. Producers and consumers must agree on time (run NTP):
    due times and leases are compared across machines."""
    return time.time_ns() // 1_000_000
