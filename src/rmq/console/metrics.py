"""Prometheus metrics (``/metrics`` of the console, or ``rmq metrics --port`` alone): a
collector that reads ``stats()`` and ``consumers()`` of every topic at scrape time, so a
scrape always sees the queue as it is and nothing runs between scrapes.

Names follow Prometheus conventions: ``rmq_`` prefix, ``_total`` counters, base units
(seconds), one label set per topic and group (and consumer, for what each consumer reports);
docs/console.md lists them, and what an autoscaler and a dashboard read of them
(``deploy/``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterator

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry

import rmq

__all__ = ["QueueCollector", "registry_for", "COUNTER_HELP"]

COUNTER_HELP = {
    "sent": "Messages sent to the group that its filters accepted (merged ones included)",
    "merged": "Sends that merged into a message already pending",
    "filtered": "Messages sent to the topic that the group's filters rejected",
    "acked": "Deliveries acknowledged",
    "retried": "Deliveries that failed and were scheduled again",
    "dead": "Messages dead-lettered after their last retry",
    "superseded": "Running deliveries a newer send told to stop (groups bound with supersede)",
    "cancelled": "Pending messages removed and running deliveries told to stop by a cancel",
}
COUNTER_NAMES = {"sent": "sent", "merged": "merged", "filtered": "filtered", "acked": "acked",
                 "retried": "retried", "dead": "dead_lettered", "superseded": "superseded",
                 "cancelled": "cancelled"}
DEAD_AFTER = 10.0
log = logging.getLogger("rmq.console")


class QueueCollector(Collector):
    """Reads the queue through ``client`` whenever Prometheus scrapes."""

    def __init__(self, client: rmq.Client):
        self.client = client

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
        handler = HistogramMetricFamily(
            "rmq_handler_seconds", "How long handler runs took, as each consumer reports it "
            "since it started (sum by topic and group for the group's)",
            labels=[*labels, "consumer"])
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
                for name, family in counters.items():
                    # superseded and cancelled are stored once they first happen
                    family.add_metric(key, group.counters.get(name, 0))
                mine = [c for c in found if c.group == group.group]
                alive.add_metric(key, sum(c.alive for c in mine))
                dead.add_metric(key, sum(not c.alive for c in mine))
                concurrency.add_metric(key, sum(c.concurrency for c in mine if c.alive))
                for consumer in mine:
                    if consumer.handler_times is not None:
                        handler.add_metric([*key, consumer.id], [
                            ("+Inf" if bound == float("inf") else f"{bound:g}", runs)
                            for bound, runs in consumer.handler_times.cumulative()],
                            consumer.handler_times.seconds)
            slots.add_metric([topic], max((len(g.slots) for g in stats.groups.values()),
                                          default=0))
            open_tx.add_metric([topic], stats.transactions.open)
            halves.add_metric([topic], stats.transactions.halves)
            abandoned.add_metric([topic], stats.transactions.abandoned)
        yield from (backlog, ready, oldest, expired, limit, limit_used, *counters.values(),
                    handler, alive, dead, concurrency, paused, slots, broken, open_tx, halves,
                    abandoned)


def registry_for(client: rmq.Client) -> CollectorRegistry:
    """A registry holding only the queue's collector (no process metrics of this server)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(QueueCollector(client))
    return registry
