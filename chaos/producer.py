"""A producer thread for fault scenarios: sends unique bodies and remembers what it was told.

A body whose send returned is *sent* (Redis acknowledged it and must never lose it); a body
whose send raised :class:`~rmq.errors.RedisUnavailable` is *uncertain* (the producer was
told; it may or may not be stored). Any other exception is a failure of the scenario: the
contract is a clear RedisUnavailable or success. Each send's latency is recorded, to check
that a producer is never blocked beyond the client's bounded reconnect time.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Sequence
from typing import Any

from rmq.client import Client
from rmq.errors import RedisUnavailable

__all__ = ["Producer"]


class Producer(threading.Thread):
    """Sends ``bodies`` to ``topic`` in batches of ``batch`` (one ``send`` each when 1)."""

    def __init__(self, url: str, topic: str, bodies: Sequence[bytes], batch: int = 1,
                 **redis_options: Any):
        super().__init__(name=f"producer-{topic}", daemon=True)
        self.client = Client(url, **redis_options)
        self.topic, self.bodies, self.batch = topic, bodies, batch
        self.sent: list[bytes] = []
        self.uncertain: list[bytes] = []
        self.other_errors: list[str] = []
        self.slowest = 0.0  # seconds of the slowest send (or failed send)
        self.successes: list[float] = []  # monotonic time of each successful send call
        self._lock = threading.Lock()

    @property
    def done(self) -> int:
        """Bodies whose send has returned or raised."""
        with self._lock:
            return len(self.sent) + len(self.uncertain)

    def successes_after(self, moment: float) -> float | None:
        """When the first successful send after ``moment`` returned (monotonic), if any."""
        with self._lock:
            i = bisect.bisect_right(self.successes, moment)
            return self.successes[i] if i < len(self.successes) else None

    def run(self) -> None:
        try:
            for start in range(0, len(self.bodies), self.batch):
                chunk = list(self.bodies[start : start + self.batch])
                began = time.monotonic()
                try:
                    if len(chunk) == 1:
                        self.client.send(self.topic, chunk[0])
                    else:
                        self.client.send_many(self.topic, chunk)
                except RedisUnavailable:
                    with self._lock:
                        self.uncertain += chunk
                except Exception as exc:  # noqa: BLE001 - recorded as a scenario failure
                    with self._lock:
                        self.uncertain += chunk
                        self.other_errors.append(f"{type(exc).__module__}.{exc!r}")
                else:
                    ended = time.monotonic()
                    with self._lock:
                        self.sent += chunk
                        self.successes.append(ended)
                self.slowest = max(self.slowest, time.monotonic() - began)
        finally:
            self.client.close()
