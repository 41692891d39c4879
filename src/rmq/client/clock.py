"""Where a client's time comes from: the Redis server's clock (SPEC §7, "one clock").

Every due time, lease, promotion and recovery is compared across clients, so they must all
read one clock. A client therefore never trusts its host's wall clock: :class:`ServerClock`
measures the offset between the server's ``TIME`` and a local *steady* clock (one that never
jumps), at connect and again every few seconds, and reads the server's time from it between
measurements. A host whose clock is minutes off (or reads 1970) behaves exactly like one
whose clock is right.

An explicit ``clock`` callable (epoch ms) replaces this: tests pass a controllable one.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from ..errors import InvalidClock
from ..storage.calls import Op, command
from ..storage.codec import EPOCH_MS

__all__ = ["Clock", "ServerClock", "steady_ms", "system_clock", "check_epoch", "LATEST_MS"]

Clock = Callable[[], int]  # epoch milliseconds

# The stored scores count milliseconds from 2024-01-01 (storage/codec.py); a ready score's
# stamp has room for about 69 years of them, and a due time may lie 10 years ahead (the
# largest max_delay): a clock must read between 2024 and 2080.
LATEST_MS = 3_471_292_800_000  # 2080-01-01T00:00:00Z
RESYNC_SECONDS = 10.0
SAMPLES = 3  # TIME round trips per measurement


def system_clock() -> int:
    """This host's wall clock in epoch ms. Only for ``Client(clock=system_clock)``, which
    trusts it: hosts must then agree on time (NTP), since due times and leases are compared
    across machines. The default, :class:`ServerClock`, needs no such agreement."""
    return time.time_ns() // 1_000_000


_STEADY = getattr(time, "CLOCK_BOOTTIME", time.CLOCK_MONOTONIC)


def steady_ms() -> float:
    """A local clock in ms that never jumps and keeps counting while the machine sleeps
    (``CLOCK_BOOTTIME`` on Linux, else the monotonic clock); its zero means nothing."""
    return time.clock_gettime_ns(_STEADY) / 1_000_000


def check_epoch(now_ms: int, source: str) -> int:
    """``now_ms`` if RMQ can store times from it (2024-01-01 to 2080-01-01); else
    :class:`~rmq.errors.InvalidClock` naming ``source``."""
    if not EPOCH_MS <= now_ms < LATEST_MS:
        raise InvalidClock(
            f"{source} reads {now_ms} ms since 1970, outside what RMQ can store "
            f"(2024-01-01 to 2080-01-01, {EPOCH_MS} to {LATEST_MS} ms): set that clock right")
    return now_ms


class ServerClock:
    """The Redis server's time in epoch ms, read as a local clock plus a measured offset.

    ``measure()`` (an operation, run by the client) sends ``TIME`` and takes the server's
    answer as the time at the midpoint of the round trip: the error is at most half the
    fastest of a few round trips (a fraction of a millisecond on a LAN) plus the local
    clock's drift since, which re-measuring every ``resync`` seconds keeps to microseconds.
    The client re-measures after a failed round trip too (it may reach another server after
    reconnecting).

    ``local``: milliseconds of the local clock it counts from, :func:`steady_ms` by default.
    Any clock that runs at the right rate will do, whatever it reads: tests pass a wall
    clock skewed by minutes and see the same behaviour.
    """

    def __init__(self, local: Callable[[], float] = steady_ms, resync: float = RESYNC_SECONDS):
        self.local = local
        self.resync_ms = resync * 1000
        self.uncertainty_ms = 0.0  # half the round trip of the last measurement
        self._offset: float | None = None
        self._measured_at = 0.0

    def __call__(self) -> int:
        """The server's time now, in epoch ms."""
        if self._offset is None:
            raise InvalidClock("the server's clock has not been measured yet: the client "
                               "measures it when it connects (AsyncClient: await open())")
        return int(self.local() + self._offset)

    def read(self) -> int | None:
        """The server's time now, in epoch ms, or None when it is time to measure (never
        measured, stale, or invalidated)."""
        local = self.local()
        if self._offset is None or not 0 <= local - self._measured_at < self.resync_ms:
            return None
        return int(local + self._offset)

    @property
    def due(self) -> bool:
        """Whether it is time to measure (never measured, stale, or invalidated)."""
        return self.read() is None

    def invalidate(self) -> None:
        """Measure again before the next use (a round trip failed: reconnecting may reach
        another server)."""
        self._measured_at = float("-inf")

    def measure(self) -> Op[int]:
        """Measure the offset with a few ``TIME`` round trips, one after the other, and keep
        the fastest: the first may carry a connection's setup, which would skew the
        midpoint. Returns the server's time."""
        self._measured_at = self.local()  # concurrent callers do not all measure at once
        best: tuple[float, float, int] | None = None  # (round trip, offset, server ms)
        for _ in range(SAMPLES):
            sent = self.local()
            ((seconds, micros),) = yield [command("TIME")]
            received = self.local()
            server = int(seconds) * 1000 + int(micros) / 1000
            sample = (received - sent, server - (sent + received) / 2, int(server))
            best = sample if best is None or sample[0] < best[0] else best
        assert best is not None
        round_trip, offset, server_ms = best
        check_epoch(server_ms, "the Redis server's clock")
        self._offset, self.uncertainty_ms = offset, round_trip / 2
        return server_ms
