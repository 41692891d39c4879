"""``stats(topic)``: sizes by state and counters, per group and per slot (SPEC §4)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..settings import GroupLimits
from .calls import Op, script_call
from .keys import SlotKeys
from .scripts import script
from .transactions import TransactionStats

__all__ = ["SlotStats", "GroupStats", "TopicStats", "collect"]

COUNTERS = ("sent", "merged", "filtered", "acked", "retried", "dead")


@dataclass(frozen=True, slots=True)
class SlotStats:
    """One group in one slot. ``ready_by_priority`` maps priority to count;
    ``oldest_ready_ms`` is the age of the longest-waiting ready message (0 if none);
    counters: sent (accepted by the group's filters), merged, filtered (rejected by them),
    acked, retried, dead (dead-lettered)."""

    slot: int
    delayed: int
    ready: int
    ready_by_priority: dict[int, int]
    in_flight: int
    dead: int
    oldest_ready_ms: int
    next_due_at: int | None
    counters: dict[str, int]


@dataclass(frozen=True, slots=True)
class GroupStats:
    """Totals of a group over its slots, its fleet-wide limits, and the slots themselves."""

    group: str
    delayed: int
    ready: int
    ready_by_priority: dict[int, int]
    in_flight: int
    dead: int
    oldest_ready_ms: int
    counters: dict[str, int]
    slots: list[SlotStats] = field(default_factory=list)
    limits: GroupLimits = GroupLimits()

    @property
    def pending(self) -> int:
        return self.delayed + self.ready


@dataclass(frozen=True, slots=True)
class TopicStats:
    """Everything ``stats(topic)`` reports; ``to_dict()`` gives plain JSON-ready data."""

    topic: str
    paused: bool
    groups: dict[str, GroupStats]
    transactions: TransactionStats = field(default_factory=TransactionStats)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _slot_stats(slot: int, reply: list[Any], now: int) -> SlotStats:
    delayed, in_flight, dead, next_due, bands, flat = reply
    by_priority = {int(p): int(n) for p, n, _ in bands}
    oldest = min((int(due) for _, _, due in bands), default=now)
    counters = dict.fromkeys(COUNTERS, 0)
    for name, value in zip(flat[0::2], flat[1::2], strict=True):
        counters[name.decode()] = int(value)
    return SlotStats(slot, int(delayed), sum(by_priority.values()), by_priority, int(in_flight),
                     int(dead), max(0, now - oldest), None if next_due < 0 else int(next_due),
                     counters)


def _group_stats(group: str, slots: list[SlotStats], limits: GroupLimits) -> GroupStats:
    by_priority: dict[int, int] = {}
    counters = dict.fromkeys(COUNTERS, 0)
    for s in slots:
        for p, n in s.ready_by_priority.items():
            by_priority[p] = by_priority.get(p, 0) + n
        for name, value in s.counters.items():
            counters[name] = counters.get(name, 0) + value
    return GroupStats(
        group=group,
        delayed=sum(s.delayed for s in slots),
        ready=sum(s.ready for s in slots),
        ready_by_priority=dict(sorted(by_priority.items(), reverse=True)),
        in_flight=sum(s.in_flight for s in slots),
        dead=sum(s.dead for s in slots),
        oldest_ready_ms=max((s.oldest_ready_ms for s in slots), default=0),
        counters=counters,
        slots=slots,
        limits=limits,
    )


def collect(topic: str, groups: Sequence[str], slots: int, paused: bool,
            now: int, limits: Callable[[str], GroupLimits] = lambda _: GroupLimits(),
            trace: str = "") -> Op[TopicStats]:
    """Every group's stats (stats.lua promotes what is due first, traced with ``trace``,
    the topic's trace argument)."""
    calls = [script_call(script("stats"), SlotKeys(topic, s).group(g).all()
                         + ([SlotKeys(topic, s).trace_log] if trace else []), [now, trace])
             for g in groups for s in range(slots)]
    replies = yield calls
    out = {}
    for gi, group in enumerate(groups):
        per_slot = [_slot_stats(s, replies[gi * slots + s], now) for s in range(slots)]
        out[group] = _group_stats(group, per_slot, limits(group))
    return TopicStats(topic, paused, out)
