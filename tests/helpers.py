"""Small tools the behaviour tests share: a controllable clock, waiting with a deadline, and
reading a topic through the public API (``snapshot``, ``stats``)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import rmq
from rmq.server import wait_until

__all__ = ["ManualClock", "START_MS", "wait_for", "states", "rows", "drain"]

START_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z


class ManualClock:
    """Epoch milliseconds that move only when the test says so (``rmq.Client(clock=...)``)."""

    def __init__(self, now: int = START_MS):
        self.now = now
        self._lock = threading.Lock()

    def __call__(self) -> int:
        with self._lock:
            return self.now

    def advance(self, ms: int) -> int:
        with self._lock:
            self.now += ms
            return self.now


def wait_for(condition: Callable[[], Any], timeout: float = 10.0, what: str = "condition") -> Any:
    """Poll ``condition`` until it is truthy; fail the test after ``timeout`` seconds."""
    try:
        return wait_until(condition, timeout, what, interval=0.005)
    except TimeoutError as exc:
        raise AssertionError(str(exc)) from None


def rows(client: rmq.Client, topic: str, **kwargs: Any) -> list[Any]:
    """Every stored message of ``topic`` (``Client.snapshot``)."""
    return list(client.snapshot(topic, **kwargs))


def states(client: rmq.Client, topic: str, group: str = "default") -> dict[str, list[bytes]]:
    """The bodies of ``group`` by state, each list sorted."""
    out: dict[str, list[bytes]] = {"ready": [], "delayed": [], "in_flight": [], "dead": []}
    for row in client.snapshot(topic, groups=[group]):
        out[row.state].append(row.body)
    return {state: sorted(bodies) for state, bodies in out.items()}


def drain(client: rmq.Client, topic: str, group: str = "default") -> list[rmq.Message]:
    """Claim and acknowledge everything due, in claim order, one message at a time."""
    taken = []
    while True:
        batch = client.claim(topic, group, count=1)
        if not batch:
            return taken
        client.ack(batch)
        taken += batch
