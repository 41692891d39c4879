"""How long handlers run: a histogram each consumer keeps of its own handler runs and
reports in its heartbeats (``registry.heartbeat``), which ``stats`` and ``/metrics`` add up
per group (docs/console.md, "Prometheus metrics").

The buckets are fixed, in seconds, from 5 ms (a lookup) to 10 minutes (a render), so
histograms of every consumer of a group add up bucket by bucket, as Prometheus adds them.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["BOUNDS", "HandlerTimes", "HandlerClock"]

# upper bounds of the buckets, seconds (a run that took longer counts in +Inf only)
BOUNDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0,
          300.0, 600.0)


@dataclass(frozen=True, slots=True)
class HandlerTimes:
    """A histogram of handler runs, cumulative from a consumer's start: ``counts[i]`` runs
    took at most ``BOUNDS[i]`` seconds and more than the bound before (the last count: more
    than the largest bound); ``seconds`` is their total time. ``count`` is every run."""

    counts: tuple[int, ...] = (0,) * (len(BOUNDS) + 1)
    seconds: float = 0.0

    @property
    def count(self) -> int:
        return sum(self.counts)

    def cumulative(self) -> list[tuple[float, int]]:
        """(upper bound, runs that took at most that long) per bucket, ``inf`` last: the
        ``le`` buckets of a Prometheus histogram."""
        out, total = [], 0
        for bound, n in zip((*BOUNDS, float("inf")), self.counts, strict=True):
            total += n
            out.append((bound, total))
        return out

    def quantile(self, q: float) -> float | None:
        """The bound of the bucket holding the ``q`` quantile (an upper estimate, as
        Prometheus' ``histogram_quantile`` without interpolation); None with no runs, inf
        beyond the largest bound."""
        if not self.count:
            return None
        wanted = q * self.count
        for bound, runs in self.cumulative():
            if runs >= wanted:
                return bound
        return float("inf")

    def __add__(self, other: HandlerTimes) -> HandlerTimes:
        return HandlerTimes(tuple(a + b for a, b in zip(self.counts, other.counts, strict=True)),
                            self.seconds + other.seconds)

    def to_json(self) -> dict[str, Any]:
        """As a heartbeat record carries it (with its bounds, which a reader checks)."""
        return {"bounds": list(BOUNDS), "counts": list(self.counts),
                "seconds": round(self.seconds, 6)}

    @classmethod
    def from_json(cls, stored: Any) -> HandlerTimes | None:
        """A histogram as a heartbeat carried it; None for one that is not RMQ's (another
        version's bounds, a record of a consumer that reported none)."""
        if not isinstance(stored, Mapping) or stored.get("bounds") != list(BOUNDS):
            return None
        counts, seconds = stored.get("counts"), stored.get("seconds")
        if (not isinstance(counts, list) or len(counts) != len(BOUNDS) + 1
                or not all(isinstance(n, int) and n >= 0 for n in counts)
                or not isinstance(seconds, int | float)):
            return None
        return cls(tuple(counts), float(seconds))

    @classmethod
    def total(cls, histograms: Iterable[HandlerTimes]) -> HandlerTimes:
        out = cls()
        for histogram in histograms:
            out += histogram
        return out


class HandlerClock:
    """A consumer's running histogram: its settler ``observe``s each run (from one
    thread), its heartbeats read ``times``."""

    def __init__(self) -> None:
        self._counts = [0] * (len(BOUNDS) + 1)
        self._seconds = 0.0

    def observe(self, seconds: float) -> None:
        self._counts[bisect_left(BOUNDS, seconds)] += 1
        self._seconds += seconds

    @property
    def times(self) -> HandlerTimes:
        return HandlerTimes(tuple(self._counts), self._seconds)
