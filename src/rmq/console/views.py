"""What the console shows, as plain JSON-ready data built from the public client API only.

Every page of the console is drawn from these shapes (through ``/api``), so the pages, the
API and the tests agree on one set of numbers.
"""

from __future__ import annotations

import threading
from typing import Any

import rmq

__all__ = ["HEAT_CELLS", "ConsumerRates", "overview", "topic_detail", "heat",
           "history_series", "message_row", "consumers_view", "broken_view", "text_of",
           "handler_times_view"]

HEAT_CELLS = 256  # at most this many cells in the slot heat map; slots share a cell beyond
STATES = ("ready", "delayed", "in_flight", "dead")
RATES = ("sent", "merged", "acked", "retried", "dead")
# Counted once they first happen (SPEC §14): shown as 0 before, like the other counters.
STOP_COUNTERS = ("superseded", "cancelled", "outdated")
DEAD_AFTER = 10.0  # seconds of silence after which a consumer shows as dead


def text_of(data: bytes | None, limit: int | None = None) -> str | None:
    """Bytes for display: UTF-8, undecodable bytes escaped, cut to ``limit`` characters."""
    if data is None:
        return None
    text = data.decode("utf-8", errors="backslashreplace")
    if limit is not None and len(text) > limit:
        return text[: limit - 1] + "…"
    return text


def _backlog(group: rmq.GroupStats) -> dict[str, int]:
    return {"ready": group.ready, "delayed": group.delayed, "in_flight": group.in_flight,
            "dead": group.dead}


def _latest_rates(samples: list[rmq.HistorySample]) -> dict[str, Any]:
    for sample in reversed(samples):
        if sample.rates is not None:
            return {"at": sample.at, **sample.rates, "merge_rate": sample.merge_rate}
    return {"at": None, **dict.fromkeys(RATES), "merge_rate": None}


def _group_view(group: rmq.GroupStats, samples: list[rmq.HistorySample],
                consumers: list[rmq.ConsumerInfo]) -> dict[str, Any]:
    mine = [c for c in consumers if c.group == group.group]
    return {
        "group": group.group,
        "backlog": _backlog(group),
        "ready_by_priority": {str(p): n for p, n in group.ready_by_priority.items()},
        "oldest_ready_ms": group.oldest_ready_ms,
        "counters": {**dict.fromkeys(STOP_COUNTERS, 0), **group.counters},
        "rates": _latest_rates(samples),
        "consumers_alive": sum(c.alive for c in mine),
        "consumers_dead": sum(not c.alive for c in mine),
        "limits": limits_view(group.limits),
        "expired": group.expired,
        "limit_in_use": group.limit_in_use,
        "batches_in_use": group.batches_in_use,
        "handler_times": handler_times_view(group.handler_times),
    }


def handler_times_view(times: rmq.HandlerTimes | None) -> dict[str, Any] | None:
    """How long a group's handlers ran, as its consumers report it: runs, mean, and the
    bucket bounds holding the median and the 95th percentile (None: no runs reported)."""
    if times is None or not times.count:
        return None

    def bound(q: float) -> float | None:
        value = times.quantile(q)
        return None if value is None or value == float("inf") else value

    return {"count": times.count, "seconds": round(times.seconds, 3),
            "mean_seconds": round(times.seconds / times.count, 4),
            "p50_at_most": bound(0.5), "p95_at_most": bound(0.95)}


def limits_view(limits: rmq.GroupLimits) -> dict[str, Any]:
    """A group's limits as the API gives them (and takes them: api.Limits)."""
    rate = None if limits.rate is None else {"count": limits.rate[0],
                                             "seconds": limits.rate[1]}
    return {"max_in_flight": limits.max_in_flight, "rate": rate,
            "max_batches": limits.max_batches}


def _topic_view(client: rmq.Client, info: rmq.TopicInfo) -> tuple[rmq.TopicStats,
                                                                   dict[str, Any]]:
    name = info.name
    stats = client.stats(name)
    history = client.history(name, minutes=5)
    consumers = client.consumers(name, dead_after=DEAD_AFTER)
    groups = [_group_view(g, history.groups.get(g.group, []), consumers)
              for g in stats.groups.values()
              if g.group in info.groups or g.pending or g.in_flight or g.dead]
    tx = stats.transactions
    view = {"name": name, "paused": info.paused, "slots": info.settings.slots,
            "bound_groups": list(info.groups), "groups": groups,
            "filters": {group: {"tags": f.tags, "where": f.where} for group, f in info.filters},
            "supersede": dict(info.supersede),
            "transactions": {"open": tx.open, "halves": tx.halves, "abandoned": tx.abandoned}}
    return stats, view


def broken_view(found: rmq.PerTopic[Any]) -> list[dict[str, str]]:
    """The topics an operation over every topic skipped, each with what is wrong."""
    return [{"name": name, "problem": problem} for name, problem in found.broken.items()]


def overview(client: rmq.Client) -> dict[str, Any]:
    """Every topic: per group its backlog by state and priority, latest rates and merge
    rate, oldest ready age and consumers alive; and the broken topics, with what is wrong
    (one broken topic hides no other)."""
    found = client.each_topic(lambda info: _topic_view(client, info)[1])
    return {"topics": list(found.results.values()), "broken": broken_view(found)}


def heat(stats: rmq.TopicStats, cells: int = HEAT_CELLS) -> dict[str, Any]:
    """Per-slot backlog summed over groups, in at most ``cells`` cells of consecutive slots:
    what a heat map draws, in a size that does not grow with the slot count."""
    groups = list(stats.groups.values())
    slots = len(groups[0].slots) if groups else 0
    per_cell = max(1, -(-slots // cells))
    out = []
    for first in range(0, slots, per_cell):
        last = min(first + per_cell, slots) - 1
        cell = {"first": first, "last": last, **dict.fromkeys(STATES, 0)}
        for group in groups:
            for s in group.slots[first: last + 1]:
                cell["ready"] += s.ready
                cell["delayed"] += s.delayed
                cell["in_flight"] += s.in_flight
                cell["dead"] += s.dead
        out.append(cell)
    return {"slots": slots, "slots_per_cell": per_cell, "cells": out}


def topic_detail(client: rmq.Client, name: str) -> dict[str, Any]:
    """One topic: settings, groups (as in the overview), slot heat, per-group slot counts."""
    info = client.topic(name, fresh=True)
    stats, view = _topic_view(client, info)
    view["settings"] = info.settings.to_dict()
    view["unbound_groups"] = list(info.unbound_groups)
    view["heat"] = heat(stats)
    return view


def history_series(history: rmq.TopicHistory) -> dict[str, Any]:
    """Per group, chart-ready columns (``at`` and one list per rate and backlog state);
    a gap between samples gets a row of nulls so that charts break the line there."""
    groups = {}
    for group, samples in history.groups.items():
        columns: dict[str, list[Any]] = {name: [] for name in (
            "at", *RATES, "merge_rate", *(f"backlog_{s}" for s in STATES))}
        previous = None
        for sample in samples:
            if previous is not None and sample.rates is None:
                _add_row(columns, (previous.at + sample.at) // 2, None)
            _add_row(columns, sample.at, sample)
            previous = sample
        groups[group] = columns
    return {"width_ms": history.width_ms, "since": history.since, "now": history.now,
            "groups": groups}


def _add_row(columns: dict[str, list[Any]], at: int, sample: rmq.HistorySample | None) -> None:
    columns["at"].append(at)
    rates = sample.rates if sample is not None else None
    for name in RATES:
        columns[name].append(None if rates is None else round(rates[name], 3))
    merge = None if sample is None or sample.merge_rate is None else round(sample.merge_rate, 4)
    columns["merge_rate"].append(merge)
    for state in STATES:
        columns[f"backlog_{state}"].append(None if sample is None else sample.backlog[state])


def message_row(row: rmq.SnapshotRow, body_limit: int | None = 500) -> dict[str, Any]:
    """A stored message for display. ``holder``: the id of the consumer that claimed an
    in-flight message (None if its claim did not say who it was); ``corrupt``: what is
    stored cannot be decoded, ``body`` is its bytes as stored and ``error`` what failed."""
    return {
        "state": row.state, "group": row.group, "slot": row.slot, "priority": row.priority,
        "due_at": row.due_at, "attempts": row.attempts, "key": text_of(row.key),
        "body": text_of(row.body, body_limit), "body_bytes": len(row.body),
        "id": row.id, "message_id": row.message_id, "lease_until": row.lease_until,
        "dead_at": row.dead_at, "error": row.error, "holder": row.holder,
        "tag": row.tag, "properties": dict(row.properties), "corrupt": row.corrupt,
    }


class ConsumerRates:
    """Handled per second of each consumer, from the last two distinct heartbeats this
    console saw (a heartbeat carries the count handled so far and its time)."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[tuple[float, int], tuple[float, int] | None]] = {}
        self._lock = threading.Lock()

    def rate(self, consumer: rmq.ConsumerInfo) -> float | None:
        beat = (consumer.last_seen / 1000, consumer.handled)
        with self._lock:
            latest, before = self._seen.get(consumer.id, (beat, None))
            if beat[0] > latest[0]:
                latest, before = beat, latest
            self._seen[consumer.id] = (latest, before)
        if before is None or latest[0] <= before[0]:
            return None
        return max(0.0, (latest[1] - before[1]) / (latest[0] - before[0]))


def consumers_view(client: rmq.Client, rates: ConsumerRates,
                   topic: str | None = None) -> dict[str, Any]:
    """Every consumer of ``topic`` (or of every topic, and the broken topics skipped):
    liveness, last heartbeat, in flight, handled and failed counts, handled per second.
    Ages are measured on the queue's clock (Redis's, by which heartbeats are stamped), which
    ``now`` gives the pages too: the console's host clock and the browser's never count."""
    if topic is not None:
        found = rmq.PerTopic({topic: client.consumers(topic, dead_after=DEAD_AFTER)}, {})
    else:
        found = client.each_topic(lambda info: client.consumers(info.name,
                                                                dead_after=DEAD_AFTER))
    now = client.now() / 1000
    out = []
    for c in (c for consumers in found.results.values() for c in consumers):
        out.append({
            "id": c.id, "topic": c.topic, "group": c.group, "host": c.host, "pid": c.pid,
            "alive": c.alive, "started_at": c.started_at / 1000,
            "last_seen": c.last_seen / 1000,
            "seconds_since_heartbeat": round(max(0.0, now - c.last_seen / 1000), 1),
            "concurrency": c.concurrency, "in_flight": c.in_flight, "handled": c.handled,
            "failed": c.failed, "handled_per_second": rates.rate(c),
        })
    out.sort(key=lambda c: (not c["alive"], c["topic"], c["group"], c["id"]))
    return {"consumers": out, "now": now, "broken": broken_view(found)}
