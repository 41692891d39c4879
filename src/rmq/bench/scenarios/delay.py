"""``delay``: how late delayed messages are handled against their due time, with the consumer
idle and under a steady load of ready messages from another process (half of what the
consumer was just measured to handle, at most ``delay_load``); and how fast an idle
consumer wakes for a new message, against a Streams consumer blocked in XREADGROUP."""

from __future__ import annotations

import random
import threading
import time
from typing import Any

import redis

import rmq

from ..context import Bench
from ..jobs import paced_send_job
from ..parallel import Span, time_processes
from ..report import Figure, Report, at_most
from ..workload import Bodies, Tally, latency_summary, make_bodies, make_body

__all__ = ["run"]

WAIT = 60.0
WAKE_REF = "Streams XREADGROUP BLOCK wake-up"
LOAD_SHARE = 0.5  # load as a share of the consumer's measured capacity


class _Lateness:
    """The handler: lateness of each delayed message (handler start minus due time, ms)."""

    def __init__(self, tally: Tally):
        self.tally = tally
        self.late_ms: list[float] = []
        self.first_load = threading.Event()

    def __call__(self, message: rmq.Message) -> None:
        now_ms = time.time() * 1000
        if message.body.startswith(b"delayed"):
            self.late_ms.append(now_ms - message.due_at)
        else:
            self.first_load.set()
        self.tally.add(message.body)


def _gap(ms: float) -> None:
    threading.Event().wait(ms / 1000)  # idle time, so the consumer is asleep: not a sync


def _wake_ups(bench: Bench, topic: str) -> list[float]:
    s, client = bench.sizes, bench.client
    arrived, got = {}, threading.Event()

    def handle(message: rmq.Message) -> None:
        arrived[message.body] = time.perf_counter()
        got.set()

    consumer = rmq.Consumer(client, topic, handle, concurrency=s.concurrency).start()
    latencies = []
    try:
        for i in range(s.wake_probes):
            _gap(s.idle_gap_ms)
            body = make_body(b"wake", i, s.body_size)
            got.clear()
            start = time.perf_counter()
            client.send(topic, body)
            got.wait(WAIT)
            if body in arrived:
                latencies.append((arrived[body] - start) * 1000)
    finally:
        consumer.stop()
    return latencies


def _wake_ups_streams(bench: Bench) -> list[float]:
    s, r = bench.sizes, bench.redis
    r.xgroup_create("ref:wake", "g", id="$", mkstream=True)
    arrived: dict[bytes, float] = {}
    got, stop = threading.Event(), threading.Event()

    def consume() -> None:
        reader = redis.Redis.from_url(bench.url)
        while not stop.is_set():
            # [[stream, [(id, fields), ...]]]: redis-py's annotation is a union of every
            # protocol's reply shape, which does not index.
            reply: Any = reader.xreadgroup("g", "c", {"ref:wake": ">"}, count=1, block=200)
            for entry_id, fields in (reply[0][1] if reply else []):
                arrived[fields[b"b"]] = time.perf_counter()
                reader.xack("ref:wake", "g", entry_id)
                got.set()
        reader.close()

    thread = threading.Thread(target=consume, daemon=True)
    thread.start()
    latencies = []
    for i in range(s.wake_probes):
        _gap(s.idle_gap_ms)
        body = make_body(b"wake", i, s.body_size)
        got.clear()
        start = time.perf_counter()
        r.xadd("ref:wake", {b"b": body})
        got.wait(WAIT)
        if body in arrived:
            latencies.append((arrived[body] - start) * 1000)
    stop.set()
    thread.join()
    return latencies


def _lateness(bench: Bench, topic: str, load: int) -> tuple[list[float], Tally]:
    """Send delayed messages (due 10 ms .. delay_max_ms ahead) and note how late they are
    handled; with ``load`` > 0 another process sends ready messages meanwhile."""
    s, client = bench.sizes, bench.client
    rng = random.Random(11)
    delayed = [{"body": make_body(b"delayed", i, s.body_size),
                "delay_ms": rng.randint(10, s.delay_max_ms)} for i in range(s.delay_messages)]
    load_count = int(load * (s.delay_max_ms / 1000 + 0.5))
    tally = Tally(len(delayed) + load_count, keep=bench.verify)
    watch = _Lateness(tally)
    consumer = rmq.Consumer(client, topic, watch, concurrency=s.concurrency).start()
    spans: list[Span] = []
    loader = None
    try:
        if load_count:
            bodies = Bodies(b"load", s.body_size, 0, load_count)
            loader = threading.Thread(target=lambda: spans.append(time_processes(
                paced_send_job, [(bench.url, topic, bodies, load, 50)])), daemon=True)
            loader.start()
            watch.first_load.wait(WAIT)
        client.send_many(topic, delayed)
        tally.done.wait(WAIT + s.delay_max_ms / 1000)
        if loader is not None:
            loader.join(WAIT)
    finally:
        consumer.stop()
    return watch.late_ms, tally


def _capacity(bench: Bench, topic: str) -> float:
    """Messages/s one Consumer handles here and now (no-op handler): the load is set below
    it, so "under load" means busy but keeping up, not an ever-growing backlog."""
    s = bench.sizes
    count = max(500, s.delay_load // 4)
    tally = Tally(count)
    consumer = rmq.Consumer(bench.client, topic, lambda m: tally.add(m.body),
                            concurrency=s.concurrency)
    bench.client.send_many(topic, make_bodies(b"calibrate", 0, count, s.body_size))
    start = time.perf_counter()
    consumer.start()
    tally.done.wait(WAIT)
    seconds = time.perf_counter() - start
    consumer.stop()
    return count / seconds


def _check(report: Report, bench: Bench, label: str, topic: str, tally: Tally) -> None:
    report.expect_equal(f"{label}: handled", tally.count, tally.target)
    if tally.bodies is not None:
        report.check(f"{label}: every message handled exactly once",
                     len(tally.bodies) == tally.target and set(tally.bodies.values()) <= {1},
                     f"{len(tally.bodies)} distinct bodies of {tally.target}")
    stats = bench.group_stats(topic)
    report.expect_equal(f"{label}: acked counter", stats.counters["acked"], tally.target)
    report.expect_equal(f"{label}: left pending or in flight", stats.pending + stats.in_flight, 0)


def _chart(report: Report, ax: Any) -> None:
    for name, values in report.series.items():
        ordered = sorted(max(v, 0.05) for v in values)  # log scale: clip at 50 µs
        if ordered:
            ax.plot(ordered, [(i + 1) / len(ordered) for i in range(len(ordered))], label=name)
    ax.axvline(5.0, color="red", linestyle=":", label="wake-up target 5 ms")
    ax.axvline(10.0, color="red", linestyle="--", label="lateness target 10 ms")
    ax.set_xscale("log")
    ax.set_xlabel("milliseconds (log scale)")
    ax.set_ylabel("share of messages")
    ax.set_title("rmq bench: delay lateness and idle wake-up")
    ax.legend(fontsize=8)


def _add_latency(report: Report, name: str, values: list[float], target: float | None,
                 compare: list[str] | None = None) -> None:
    summary = latency_summary(values)
    report.series[name] = values
    for q in ("p50", "p99", "max"):
        report.add(Figure(f"{name}, {q}", summary[q], "ms",
                          compare=[f"{c}, {q}" for c in compare or []],
                          targets=[at_most(target, "ms")(summary[q])] if target and q == "p99"
                          else []))


def run(bench: Bench) -> Report:
    s, step = bench.sizes, bench.progress.step
    report = Report("delay", {"wake_probes": s.wake_probes, "idle_gap_ms": s.idle_gap_ms,
                              "delayed_messages": s.delay_messages,
                              "delay_range_ms": [10, s.delay_max_ms],
                              "max_load_msgs_per_s": s.delay_load}, chart=_chart)
    for topic in ("bench.wake", "bench.idle", "bench.load", "bench.capacity"):
        bench.client.create_topic(topic)
    with step(f"{s.wake_probes} idle wake-ups"):
        wake = _wake_ups(bench, "bench.wake")
    report.expect_equal("idle wake-ups: every probe handled", len(wake), s.wake_probes)
    with step(f"{s.wake_probes} Streams wake-ups (reference)"):
        wake_ref = _wake_ups_streams(bench)
    with step(f"{s.delay_messages} delayed messages, idle consumer"):
        idle, idle_tally = _lateness(bench, "bench.idle", 0)
    _check(report, bench, "idle", "bench.idle", idle_tally)
    with step("measuring the consumer's capacity"):
        capacity = _capacity(bench, "bench.capacity")
    load = int(min(s.delay_load, LOAD_SHARE * capacity))
    report.params["consumer_capacity_msgs_per_s"] = round(capacity)
    report.params["load_msgs_per_s"] = load
    with step(f"{s.delay_messages} delayed messages under {load} msg/s of load"):
        loaded, load_tally = _lateness(bench, "bench.load", load)
    _check(report, bench, "under load", "bench.load", load_tally)

    _add_latency(report, "idle wake-up, send to handler", wake, 5.0, [WAKE_REF])
    _add_latency(report, "delayed lateness, idle", idle, 10.0)
    _add_latency(report, "delayed lateness, under load", loaded, None)
    summary = latency_summary(wake_ref)
    report.series[WAKE_REF] = wake_ref
    for q in ("p50", "p99", "max"):
        report.add(Figure(f"{WAKE_REF}, {q}", summary[q], "ms", role="reference"))
    return report
