"""``stats(topic)``: sizes by state and counters, per group and per slot (SPEC §4), and the
signals an autoscaler reads (SPEC §16): of the in-flight deliveries those whose lease ran
out and that are not recovered yet, the units of a ``max_in_flight`` in use, and the
handler times the group's consumers report."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..settings import GroupLimits
from .calls import Op, command, script_call
from .handler_times import HandlerTimes
from .keys import LimitKeys, RegistryKeys, SlotKeys
from .scripts import script
from .transactions import TransactionStats

__all__ = ["SlotStats", "GroupStats", "TopicStats", "collect"]

COUNTERS = ("sent", "merged", "filtered", "acked", "retried", "dead", "superseded",
            "cancelled", "outdated")


@dataclass(frozen=True, slots=True)
class SlotStats:
    """One group in one slot. ``ready_by_priority`` maps priority to count;
    ``oldest_ready_ms`` is the age of the longest-waiting ready message (0 if none);
    ``expired``: of the ``in_flight``, those whose lease ran out, not recovered yet;
    counters: sent (accepted by the group's filters), merged, filtered (rejected by them),
    acked, retried, dead (dead-lettered), superseded (running deliveries a send told to
    stop), cancelled (pending messages removed and running deliveries told to stop) and
    outdated (sends dropped as older than their key's version: docs/semantics.md,
    "Versions")."""

    slot: int
    delayed: int
    ready: int
    ready_by_priority: dict[int, int]
    in_flight: int
    dead: int
    oldest_ready_ms: int
    next_due_at: int | None
    counters: dict[str, int]
    expired: int = 0


@dataclass(frozen=True, slots=True)
class GroupStats:
    """Totals of a group over its slots, its fleet-wide limits, and the slots themselves.

    ``expired``: of the ``in_flight``, the deliveries whose lease ran out and that are not
    recovered yet (a consumer died or froze; recovery gives them back within seconds).
    ``limit_in_use``: the units of the group's ``max_in_flight`` held now (None without
    one), so ``limit_in_use / limits.max_in_flight`` is how full the limit is;
    ``batches_in_use`` the same of its ``max_batches``: its claims in flight.
    ``handler_times``: how long the handler runs of the group's registered consumers took,
    added up (None when none reported any)."""

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
    expired: int = 0
    limit_in_use: int | None = None
    handler_times: HandlerTimes | None = None
    batches_in_use: int | None = None

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


def _slot_stats(slot: int, reply: list[Any], now: int, expired: int) -> SlotStats:
    delayed, in_flight, dead, next_due, bands, flat = reply[:6]
    by_priority = {int(p): int(n) for p, n, _ in bands}
    oldest = min((int(due) for _, _, due in bands), default=now)
    counters = dict.fromkeys(COUNTERS, 0)
    for name, value in zip(flat[0::2], flat[1::2], strict=True):
        counters[name.decode()] = int(value)
    return SlotStats(slot, int(delayed), sum(by_priority.values()), by_priority, int(in_flight),
                     int(dead), max(0, now - oldest), None if next_due < 0 else int(next_due),
                     counters, int(expired))


def _group_stats(group: str, slots: list[SlotStats], limits: GroupLimits,
                 limit_in_use: int | None = None,
                 handler_times: HandlerTimes | None = None,
                 batches_in_use: int | None = None) -> GroupStats:
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
        expired=sum(s.expired for s in slots),
        limit_in_use=limit_in_use,
        handler_times=handler_times,
        batches_in_use=batches_in_use,
    )


# Expired leases one stats call reads per group and slot at most (a lower bound beyond:
# recovery, every few seconds, keeps them few).
EXPIRED_READ = 10_000


def collect(topic: str, groups: Sequence[str], slots: int, paused: bool,
            now: int, limits: Callable[[str], GroupLimits] = lambda _: GroupLimits(),
            trace: str = "", signals: bool = True) -> Op[TopicStats]:
    """Every group's stats (stats.lua promotes what is due first, traced with ``trace``,
    the topic's trace argument). With ``signals``, in the same round trip: the expired
    deliveries, the units of each ``max_in_flight`` and ``max_batches`` in use and the
    consumers' handler times (a history sample, which keeps none of them, reads none)."""
    calls = [script_call(script("stats"), SlotKeys(topic, s).group(g).all()
                         + ([SlotKeys(topic, s).trace_log] if trace else []), [now, trace])
             for g in groups for s in range(slots)]
    limited = [g for g in groups if limits(g).max_in_flight is not None] if signals else []
    batched = [g for g in groups if limits(g).max_batches is not None] if signals else []
    if signals:
        calls += [script_call(script("expired"), [keys.inflight, keys.leases],
                              [now, EXPIRED_READ])
                  for g in groups for keys in (SlotKeys(topic, s).group(g)
                                               for s in range(slots))]
        # a permit's score is its lease's deadline: those past it hold nothing
        calls += [command("ZCOUNT", LimitKeys(topic, g).permits, f"({now}", "(+inf")
                  for g in limited]
        calls += [script_call(script("batches_used"),
                              [LimitKeys(topic, g).batches, LimitKeys(topic, g).permits], [now])
                  for g in batched]
        calls.append(command("HGETALL", RegistryKeys(topic).consumers))
    replies = yield calls
    cells = len(groups) * slots
    expired = replies[cells:2 * cells] if signals else [0] * cells
    in_use = dict(zip(limited, replies[2 * cells:2 * cells + len(limited)], strict=True))
    at = 2 * cells + len(limited)
    batches = dict(zip(batched, replies[at:at + len(batched)], strict=True))
    times = _handler_times(replies[-1]) if signals else {}
    out = {}
    for gi, group in enumerate(groups):
        per_slot = [_slot_stats(s, replies[gi * slots + s], now, expired[gi * slots + s])
                    for s in range(slots)]
        out[group] = _group_stats(group, per_slot, limits(group),
                                  None if group not in in_use else int(in_use[group]),
                                  times.get(group),
                                  None if group not in batches else int(batches[group]))
    return TopicStats(topic, paused, out)


def _handler_times(records: dict[bytes, bytes]) -> dict[str, HandlerTimes]:
    """Per group, the handler times its consumers' heartbeats report, added up (a record
    that is not RMQ's, or of a version without them, adds nothing)."""
    per_group: dict[str, HandlerTimes] = {}
    for raw in records.values():
        try:
            record = json.loads(raw)
            group = record["group"]
            times = HandlerTimes.from_json(record.get("handler_times"))
        except (ValueError, TypeError, KeyError, AttributeError):
            continue
        if times is not None and isinstance(group, str):
            per_group[group] = per_group.get(group, HandlerTimes()) + times
    return per_group
