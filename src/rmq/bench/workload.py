"""Workloads: message bodies, the founding case's Zipf-skewed stream of sends, counting what
consumers handle, and percentiles."""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

__all__ = ["make_body", "make_bodies", "Bodies", "founding_stream", "Tally", "percentile",
           "latency_summary"]


def make_body(prefix: bytes, n: int, size: int) -> bytes:
    """A body of ``size`` bytes (at least the prefix and number) unique per (prefix, n)."""
    head = b"%s:%012d|" % (prefix, n)
    return head + b"." * (size - len(head))


def make_bodies(prefix: bytes, start: int, count: int, size: int) -> list[bytes]:
    return [make_body(prefix, n, size) for n in range(start, start + count)]


@dataclass(frozen=True)
class Bodies:
    """A recipe for a list of bodies, cheap to send to another process: either ``count``
    distinct bodies numbered from ``start``, or one body per product id in ``ids`` (a numpy
    array; equal ids give equal bodies, which is what merges)."""

    prefix: bytes
    size: int
    start: int = 0
    count: int = 0
    ids: Any = None

    def __len__(self) -> int:
        return self.count if self.ids is None else len(self.ids)

    def build(self) -> list[bytes]:
        if self.ids is None:
            return make_bodies(self.prefix, self.start, self.count, self.size)
        ids = self.ids.tolist()
        table = {n: make_body(self.prefix, n, self.size) for n in set(ids)}
        return [table[n] for n in ids]

    def split(self, parts: int) -> list[Bodies]:
        """``parts`` recipes that together make this one, in order."""
        total = len(self)
        cuts = [total * i // parts for i in range(parts + 1)]
        if self.ids is None:
            return [replace(self, start=self.start + a, count=b - a)
                    for a, b in zip(cuts, cuts[1:], strict=False)]
        return [replace(self, ids=self.ids[a:b]) for a, b in zip(cuts, cuts[1:], strict=False)]


def founding_stream(sends: int, duplicate_share: float, *, skew: float = 1.1,
                    seed: int = 7) -> tuple[Any, int]:
    """The founding case: ``sends`` product ids of which ``duplicate_share`` repeat an id
    sent before (so they merge while everything is queued), popularity Zipf-skewed.

    Returns (numpy array of ids in send order, number of distinct ids). Every id in
    ``range(distinct)`` occurs at least once, so the merged count is exactly
    ``sends - distinct`` when nothing is consumed meanwhile.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    distinct = max(1, round(sends * (1 - duplicate_share)))
    weights = 1.0 / np.arange(1, distinct + 1, dtype=np.float64) ** skew
    repeats = rng.choice(distinct, size=sends - distinct, p=weights / weights.sum())
    ids = np.concatenate([np.arange(distinct), repeats])
    rng.shuffle(ids)
    return ids, distinct


class Tally:
    """Counts handled messages in one process; ``done`` is set when ``target`` is reached.
    With ``keep``, also counts each body, to prove every message was handled exactly once."""

    def __init__(self, target: int, keep: bool = False):
        self.target = target
        self.count = 0
        self.done = threading.Event()
        self.bodies: Counter[bytes] | None = Counter() if keep else None
        self._lock = threading.Lock()
        if target <= 0:
            self.done.set()

    def add(self, body: bytes) -> None:
        with self._lock:
            self.count += 1
            if self.bodies is not None:
                self.bodies[body] += 1
            if self.count >= self.target:
                self.done.set()


def percentile(values: Sequence[float], q: float) -> float:
    """Nearest-rank percentile (``q`` in 0-100) of ``values``; NaN when empty."""
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(1, min(len(ordered), math.ceil(q / 100 * len(ordered))))
    return ordered[rank - 1]


def latency_summary(values: Sequence[float]) -> dict[str, float]:
    return {"p50": percentile(values, 50), "p99": percentile(values, 99),
            "max": max(values) if values else float("nan"), "n": len(values)}
