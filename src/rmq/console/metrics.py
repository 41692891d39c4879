"""Prometheus metrics (``/metrics`` of the console, or ``rmq metrics --port`` alone): a
collector that reads ``stats()`` and ``consumers()`` of every topic at scrape time, so a
scrape always sees the queue as it is and nothing runs between scrapes.

Names follow Prometheus conventions: ``rmq_`` prefix, ``_total`` counters, base units
(seconds), one label set per topic and group, and no label whose values grow with consumers
or messages; docs/console.md lists them, and what an autoscaler and a dashboard read of them
(``deploy/``).

Handler time is one histogram per group: the sum of its consumers' heartbeat histograms,
each counting from its consumer's start. A sum falls when a consumer is forgotten (or a
record restarts from zero), which ``rate()`` would read as a counter reset and count the
whole sum again; so the collector keeps, per group, what the consumers it saw and no longer
sees had counted (``GroupHandlerTimes``), and the series only grows for as long as this
process serves it.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

import rmq
from rmq import HandlerTimes

__all__ = ["QueueCollector", "GroupHandlerTimes", "registry_for", "COUNTER_HELP"]

COUNTER_HELP = {
    "sent": "Messages sent to the group that its filters accepted (merged ones included)",
    "merged": "Sends that merged into a message already pending",
    "filtered": "Messages sent to the topic that the group's filters rejected",
    "acked": "Deliveries acknowledged",
    "retried": "Deliveries that failed and were scheduled again",
    "dead": "Messages dead-lettered after their last retry",
    "superseded": "Running deliveries a newer send told to stop (groups bound with supersede)",
    "cancelled": "Pending messages removed and running deliveries told to stop by a cancel",
    "outdated": "Sends dropped as older than their key's highest version (merging by key)",
}
COUNTER_NAMES = {"sent": "sent", "merged": "merged", "filtered": "filtered", "acked": "acked",
                 "retried": "retried", "dead": "dead_lettered", "superseded": "superseded",
                 "cancelled": "cancelled", "outdated": "outdated"}
DEAD_AFTER = 10.0
log = logging.getLogger("rmq.console")


class GroupHandlerTimes:
    """A group's handler-time histogram that never falls: its consumers' histograms added up,
    plus those of consumers seen at an earlier scrape and gone since (forgotten, or whose
    record restarted from zero). It holds one histogram per consumer it sees now and one for
    the gone ones together, so it grows with the group's live consumers, not with churn."""

    def __init__(self) -> None:
        self._gone = HandlerTimes()
        self._seen: dict[str, HandlerTimes] = {}

    def update(self, consumers: Iterable[tuple[str, HandlerTimes]]) -> HandlerTimes:
        """The group's histogram, given each consumer's (id, histogram) read now."""
        now = dict(consumers)
        for consumer, before in self._seen.items():
            after = now.get(consumer)
            if after is None or any(a < b for a, b in zip(after.counts, before.counts,
                                                          strict=True)):
                self._gone += before
        self._seen = now
        return HandlerTimes.total([self._gone, *now.values()])


class QueueCollector(Collector):
    """Reads the queue through ``client`` whenever Prometheus scrapes."""

    def __init__(self, client: rmq.Client):
        self.client = client
        # per (topic, group) served: its handler times (scrapes may run concurrently)
        self._handler_times: dict[tuple[str, str], GroupHandlerTimes] = {}
        self._handler_lock = threading.Lock()

    def collect(self) -> Iterator[Metric]:
        labels = ["topic", "group"]
        backlog = GaugeMetricFamily("rmq_messages", "Messages held, by state",
                                    labels=[*labels, "state"])
        ready = GaugeMetricFamily("rmq_ready_messages",
                                  "Ready messages by priority (0-255, higher first)",
                                  labels=[*labels, "priority"])
        oldest = GaugeMetricFamily("rmq_oldest_ready_age_seconds",
                                   "Age of the longest-waiting ready message", labels=labels)
        counters = {name: CounterMetricFamily(f"rmq_messages_{COUNTER_NAMES[name]}",
                                              text, labels=labels)
                    for name, text in COUNTER_HELP.items()}
        expired = GaugeMetricFamily(
            "rmq_messages_expired", "In-flight deliveries whose lease ran out, not recovered "
            "yet (part of rmq_messages{state=\"in_flight\"})", labels=labels)
        limit = GaugeMetricFamily("rmq_in_flight_limit",
                                  "The group's max_in_flight (only groups that have one)",
                                  labels=labels)
        limit_used = GaugeMetricFamily("rmq_in_flight_limit_used",
                                       "Units of the group's max_in_flight held now",
                                       labels=labels)
        batches = GaugeMetricFamily("rmq_batches_limit",
                                    "The group's max_batches (only groups that have one)",
                                    labels=labels)
        batches_used = GaugeMetricFamily("rmq_batches_limit_used",
                                         "Units of the group's max_batches held now: its "
                                         "claims in flight", labels=labels)
        rate_count = GaugeMetricFamily(
            "rmq_rate_limit_messages", "Messages the group's rate lets it claim per window "
            "(only groups that have one)", labels=labels)
        rate_window = GaugeMetricFamily("rmq_rate_limit_window_seconds",
                                        "The window of the group's rate (only groups that "
                                        "have one)", labels=labels)
        handler = HistogramMetricFamily(
            "rmq_handler_seconds", "How long the group's handler runs took, from its "
            "consumers' heartbeats", labels=labels)
        concurrency = GaugeMetricFamily("rmq_consumers_concurrency",
                                        "Handlers the group's alive consumers run at once",
                                        labels=labels)
        alive = GaugeMetricFamily("rmq_consumers_alive",
                                  "Consumers whose heartbeat is recent", labels=labels)
        dead = GaugeMetricFamily("rmq_consumers_dead",
                                 f"Consumers silent for over {DEAD_AFTER:g} s", labels=labels)
        paused = GaugeMetricFamily("rmq_topic_paused", "1 while the topic is paused",
                                   labels=["topic"])
        slots = GaugeMetricFamily("rmq_topic_slots", "Slots of the topic", labels=["topic"])
        broken = GaugeMetricFamily("rmq_topic_broken",
                                   "1 while the topic's registry entry is broken (the topic's "
                                   "other metrics are missing then)", labels=["topic"])
        open_tx = GaugeMetricFamily("rmq_transactions_open",
                                    "Transactions holding half messages", labels=["topic"])
        halves = GaugeMetricFamily("rmq_half_messages",
                                   "Half messages of open transactions", labels=["topic"])
        abandoned = CounterMetricFamily("rmq_transactions_abandoned",
                                        "Transactions rolled back after max_checks unanswered "
                                        "checks", labels=["topic"])
        read = self.client.each_topic(lambda info: (
            self.client.stats(info.name),
            self.client.consumers(info.name, dead_after=DEAD_AFTER)))
        for topic, problem in read.broken.items():
            log.debug("/metrics skips topic %r: %s", topic, problem)
            broken.add_metric([topic], 1.0)
        served: set[tuple[str, str]] = set()
        for topic, (stats, found) in read.results.items():
            broken.add_metric([topic], 0.0)
            paused.add_metric([topic], float(stats.paused))
            for group in stats.groups.values():
                key = [topic, group.group]
                for state in ("ready", "delayed", "in_flight", "dead"):
                    backlog.add_metric([*key, state], getattr(group, state))
                for priority, count in group.ready_by_priority.items():
                    ready.add_metric([*key, str(priority)], count)
                oldest.add_metric(key, group.oldest_ready_ms / 1000)
                expired.add_metric(key, group.expired)
                if group.limits.max_in_flight is not None:
                    limit.add_metric(key, group.limits.max_in_flight)
                    limit_used.add_metric(key, group.limit_in_use or 0)
                if group.limits.max_batches is not None:
                    batches.add_metric(key, group.limits.max_batches)
                    batches_used.add_metric(key, group.batches_in_use or 0)
                if group.limits.rate is not None:
                    rate_count.add_metric(key, group.limits.rate[0])
                    rate_window.add_metric(key, group.limits.rate[1])
                for name, family in counters.items():
                    # superseded, cancelled and outdated are stored once they first happen
                    family.add_metric(key, group.counters.get(name, 0))
                mine = [c for c in found if c.group == group.group]
                alive.add_metric(key, sum(c.alive for c in mine))
                dead.add_metric(key, sum(not c.alive for c in mine))
                concurrency.add_metric(key, sum(c.concurrency for c in mine if c.alive))
                times = self._group_handler_times(
                    (topic, group.group),
                    [(c.id, c.handler_times) for c in mine if c.handler_times is not None])
                served.add((topic, group.group))
                if times is not None:
                    handler.add_metric(key, [
                        ("+Inf" if bound == float("inf") else f"{bound:g}", runs)
                        for bound, runs in times.cumulative()], times.seconds)
            slots.add_metric([topic], max((len(g.slots) for g in stats.groups.values()),
                                          default=0))
            open_tx.add_metric([topic], stats.transactions.open)
            halves.add_metric([topic], stats.transactions.halves)
            abandoned.add_metric([topic], stats.transactions.abandoned)
        self._forget_handler_times(served, set(read.broken))
        yield from (backlog, ready, oldest, expired, limit, limit_used, batches, batches_used,
                    rate_count, rate_window, *counters.values(), handler, alive, dead,
                    concurrency, paused, slots, broken, open_tx, halves, abandoned)

    def _group_handler_times(self, key: tuple[str, str],
                             consumers: list[tuple[str, HandlerTimes]]) -> HandlerTimes | None:
        """The group's histogram to serve; None while no consumer of it ever reported one."""
        with self._handler_lock:
            times = self._handler_times.get(key)
            if times is None:
                if not consumers:
                    return None
                times = self._handler_times[key] = GroupHandlerTimes()
            return times.update(consumers)

    def _forget_handler_times(self, served: set[tuple[str, str]], broken: set[str]) -> None:
        """Groups gone (a deleted topic, an unbound group) end their series; a broken topic
        keeps its groups' counts for when it reads again."""
        with self._handler_lock:
            for key in [k for k in self._handler_times
                        if k not in served and k[0] not in broken]:
                del self._handler_times[key]


def registry_for(client: rmq.Client) -> CollectorRegistry:
    """A registry holding only the queue's collector (no process metrics of this server)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(client))
    return registry
