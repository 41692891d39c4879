"""``priority``: how fast high-priority messages come out while a consumer works through a large
low-priority backlog (1 M by default).

Probes: one HIGH message at a time, each after a short gap, timed from just before ``send`` to
the handler's first line. Burst: a ``send_many`` of many HIGH messages at once, timed to the
first and the last of them handled.
"""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import rmq

from ..context import Bench
from ..jobs import send_many_job
from ..parallel import time_inline
from ..report import Figure, Report, at_most
from ..workload import Bodies, latency_summary, make_body

__all__ = ["run"]

TOPIC = "bench.priority"
PROBE_TIMEOUT = 30.0


class _Watch:
    """The handler: notes when each HIGH message arrives and counts the LOW ones."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.arrived: dict[bytes, float] = {}
        self.times: Counter[bytes] = Counter()
        self.low = 0
        self.waiting_for: set[bytes] = set()
        self.all_arrived = threading.Event()
        self.low_started = threading.Event()

    def expect(self, bodies: list[bytes]) -> None:
        with self.lock:
            self.waiting_for = set(bodies)
            self.all_arrived.clear()

    def __call__(self, message: rmq.Message) -> None:
        now = time.perf_counter()
        with self.lock:
            if message.priority < rmq.Priority.HIGH:
                self.low += 1
                self.low_started.set()
                return
            self.arrived.setdefault(message.body, now)
            self.times[message.body] += 1
            self.waiting_for.discard(message.body)
            if not self.waiting_for:
                self.all_arrived.set()


def _chart(report: Report, ax: Any) -> None:
    probes = sorted(report.series["probe_ms"])
    ax.plot(probes, [(i + 1) / len(probes) for i in range(len(probes))], marker=".",
            label="single HIGH message, send to handler")
    ax.axvline(5.0, color="red", linestyle="--", label="target 5 ms")
    ax.set_xlabel("milliseconds")
    ax.set_ylabel("share of probes")
    ax.set_title(f"rmq bench: priority under a {report.params['backlog']:,}-message "
                 "low-priority backlog")
    ax.legend()


def run(bench: Bench) -> Report:
    s, client, step = bench.sizes, bench.client, bench.progress.step
    report = Report("priority", {"backlog": s.priority_backlog, "probes": s.priority_probes,
                                 "burst": s.priority_burst, "concurrency": s.concurrency,
                                 "probe_gap_ms": s.idle_gap_ms}, chart=_chart)
    client.create_topic(TOPIC)
    with step(f"filling a backlog of {s.priority_backlog} LOW messages"):
        low = Bodies(b"low", s.body_size, 0, s.priority_backlog)
        time_inline(send_many_job, bench.url, TOPIC, low, s.batch, rmq.Priority.LOW)
    watch = _Watch()
    consumer = rmq.Consumer(client, TOPIC, watch, concurrency=s.concurrency).start()
    try:
        watch.low_started.wait(PROBE_TIMEOUT)
        sent: dict[bytes, float] = {}
        with step(f"{s.priority_probes} single HIGH probes"):
            for i in range(s.priority_probes):
                threading.Event().wait(s.idle_gap_ms / 1000)  # pacing, not synchronisation
                body = make_body(b"high", i, s.body_size)
                watch.expect([body])
                sent[body] = time.perf_counter()
                client.send(TOPIC, body, priority=rmq.Priority.HIGH)
                watch.all_arrived.wait(PROBE_TIMEOUT)
        burst = [make_body(b"burst", i, s.body_size) for i in range(s.priority_burst)]
        with step(f"a burst of {s.priority_burst} HIGH messages"):
            watch.expect(burst)
            start = time.perf_counter()
            client.send_many(TOPIC, [{"body": b, "priority": rmq.Priority.HIGH} for b in burst])
            returned = time.perf_counter()
            watch.all_arrived.wait(PROBE_TIMEOUT)
        left = bench.group_stats(TOPIC).ready
    finally:
        consumer.stop()

    probe_ms = [(watch.arrived[b] - t) * 1000 for b, t in sent.items() if b in watch.arrived]
    summary = latency_summary(probe_ms)
    report.series["probe_ms"] = probe_ms
    report.add(Figure("HIGH probe, send to handler, p50", summary["p50"], "ms"))
    report.add(Figure("HIGH probe, send to handler, p99", summary["p99"], "ms",
                      targets=[at_most(5.0, "ms")(summary["p99"])]))
    report.add(Figure("HIGH probe, send to handler, max", summary["max"], "ms"))
    burst_times = [watch.arrived[b] for b in burst if b in watch.arrived]
    if burst_times:
        report.add(Figure(f"burst of {len(burst)} HIGH: first out", (min(burst_times) - start)
                          * 1000, "ms", targets=[at_most(5.0, "ms")((min(burst_times) - start)
                                                                    * 1000)]))
        report.add(Figure(f"burst of {len(burst)} HIGH: all out", (max(burst_times) - start)
                          * 1000, "ms"))
        report.add(Figure(f"burst of {len(burst)} HIGH: the send_many call itself",
                          (returned - start) * 1000, "ms",
                          note="the burst's times above count from the start of this call"))

    highs = list(sent) + burst
    report.expect_equal("HIGH messages handled", sum(watch.times[b] for b in highs), len(highs))
    report.check("every HIGH message handled exactly once",
                 all(watch.times[b] == 1 for b in highs), f"{len(highs)} HIGH messages")
    report.check("the LOW backlog outlasted the probes", left > 0,
                 f"{left} LOW messages still ready when the probes ended")
    stats = bench.group_stats(TOPIC)
    report.expect_equal("LOW handled + LOW still pending = backlog",
                        watch.low + stats.pending, s.priority_backlog)
    report.expect_equal("nothing left in flight after stop", stats.in_flight, 0)
    return report

