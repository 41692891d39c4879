"""Throughput history: per topic and group, a fixed ring of samples of the counters and the
backlog that the scripts already keep (``stats.lua``), so sends and claims do no extra work.

Samplers (every running console, and every consumer's housekeeping) call :func:`record`
often; a script claims each bucket of ``WIDTH_MS`` of Redis's clock for one of them, and only
that one reads the stats and writes the sample. A sample stores cumulative counters, so a
rate is a difference of two samples over the real time between them: correct whoever took
them, and a missed bucket only makes the interval longer. Samples further apart than
``GAP_AFTER_MS`` are a gap (no rate), as when nothing sampled for a while.

Each group's ring is one string of ``SIZE`` records of ``RECORD.size`` bytes, written in
place with ``SETRANGE``: an hour of 5-second samples in at most 46,080 bytes per group
(49,200 as Redis counts it), whatever the traffic. ``docs/console.md`` describes it.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from typing import Any

from .calls import Op, command, script_call
from .keys import RegistryKeys
from .scripts import script
from .stats import GroupStats, collect

__all__ = ["WIDTH_MS", "SIZE", "GAP_AFTER_MS", "RECORD", "BACKLOG", "HistorySample",
           "TopicHistory", "record", "read"]

WIDTH_MS = 5_000  # one sample per 5 seconds of Redis's clock
SIZE = 720  # samples per ring: one hour
GAP_AFTER_MS = 3 * WIDTH_MS  # samples further apart than this have no rate between them
# at (epoch ms), the five counters (cumulative), then ready, delayed, in flight, dead
RECORD = struct.Struct(">Q5Q4I")
BACKLOG = ("ready", "delayed", "in_flight", "dead")
# the counters a sample keeps (stats' filtered count is not among them: rings keep their
# record size)
COUNTERS = ("sent", "merged", "acked", "retried", "dead")
_U32 = 2**32 - 1


@dataclass(frozen=True, slots=True)
class HistorySample:
    """One sample of a group: ``at`` (epoch ms, Redis's clock), the cumulative ``counters``
    (sent, merged, acked, retried, dead) and the ``backlog`` by state then. ``rates``: each
    counter's increase per second since the previous sample, None after a gap (or after the
    counters were reset); ``merge_rate``: the share of that interval's sends that merged
    (None when nothing was sent or after a gap)."""

    at: int
    counters: dict[str, int]
    backlog: dict[str, int]
    rates: dict[str, float] | None
    merge_rate: float | None


@dataclass(frozen=True, slots=True)
class TopicHistory:
    """The samples of each group of a topic, oldest first, taken within ``since`` (epoch ms)
    to ``now``; ``width_ms`` is the sampling interval."""

    topic: str
    width_ms: int
    since: int
    now: int
    groups: dict[str, list[HistorySample]]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _pack(at: int, group: GroupStats) -> bytes:
    backlog = (group.ready, group.delayed, group.in_flight, group.dead)
    return RECORD.pack(at, *(group.counters[name] for name in COUNTERS),
                       *(min(n, _U32) for n in backlog))


def record(topic: str, groups: Sequence[str], slots: int, paused: bool, now: int, *,
           width_ms: int = WIDTH_MS, size: int = SIZE) -> Op[bool]:
    """Take the topic's sample for the current bucket unless another sampler has; returns
    whether this call took it. ``now`` (the caller's clock) is what ``stats`` promotes due
    delayed messages by; the sample's time is Redis's."""
    keys = RegistryKeys(topic)
    ((at, claimed),) = yield [script_call(script("history"), [keys.history, keys.settings],
                                          [width_ms])]
    if not claimed:
        return False
    stats = yield from collect(topic, groups, slots, paused, now, signals=False)
    offset = (int(at) // width_ms) % size * RECORD.size
    yield [command("SETRANGE", keys.history_ring(group), offset,
                   _pack(int(at), stats.groups[group])) for group in groups]
    return True


def _samples(raw: bytes | None, since: int, gap_after_ms: int) -> list[HistorySample]:
    rows = sorted(row for row in RECORD.iter_unpack(raw or b"") if row[0] >= since)
    samples: list[HistorySample] = []
    previous: tuple[int, ...] | None = None
    for row in rows:
        at, counters = row[0], dict(zip(COUNTERS, row[1:6], strict=True))
        backlog = dict(zip(BACKLOG, row[6:], strict=True))
        rates, merge_rate = None, None
        if previous is not None and 0 < at - previous[0] <= gap_after_ms:
            deltas = [now - then for now, then in zip(row[1:6], previous[1:6], strict=True)]
            if min(deltas) >= 0:  # a decrease means the counters were reset: a gap too
                seconds = (at - previous[0]) / 1000
                rates = {name: d / seconds for name, d in zip(COUNTERS, deltas, strict=True)}
                sent, merged = deltas[0], deltas[1]
                merge_rate = merged / sent if sent else None
        samples.append(HistorySample(at, counters, backlog, rates, merge_rate))
        previous = row
    return samples


def read(topic: str, groups: Sequence[str], minutes: float, *, width_ms: int = WIDTH_MS,
         gap_after_ms: int = GAP_AFTER_MS) -> Op[TopicHistory]:
    """The samples of the last ``minutes`` (at most what the ring holds) of each group."""
    keys = RegistryKeys(topic)
    (seconds, micros), *rings = yield [command("TIME"),
                                       *(command("GET", keys.history_ring(g)) for g in groups)]
    now = int(seconds) * 1000 + int(micros) // 1000
    since = now - int(minutes * 60_000)
    return TopicHistory(topic, width_ms, since, now,
                        {group: _samples(raw, since, gap_after_ms)
                         for group, raw in zip(groups, rings, strict=True)})
