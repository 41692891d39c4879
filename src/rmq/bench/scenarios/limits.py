"""``limits``: a group's fleet-wide limits (docs/limits.md). Throughput of Consumers in 4
processes under ``max_in_flight=N`` with handlers that take T seconds, against N/T (what the
limit allows), and the claim + ack loop on a topic whose group has a limit too high to bind,
against the same loop without one, in the same run (what a limit costs)."""

from __future__ import annotations

import threading
import time
from collections import Counter
from typing import Any

import rmq

from ..context import Bench
from ..jobs import claim_ack_job, open_client, send_many_job
from ..parallel import process_context, time_inline, time_processes
from ..report import Figure, Report, at_least, bar_chart, ratio_at_least
from ..workload import Bodies

__all__ = ["run"]

PROCESSES = 4
CLAIM = 100
THROUGHPUT_RATIO = 0.9  # of N/T
COST_RATIO = 0.85  # claim + ack with a limit against without
UNLIMITED = "claim+ack, 1 process, no limit"
LIMITED = "claim+ack, 1 process, max_in_flight 1000000 (never binds)"


def limited_consumer_job(url: str, topic: str, shared: tuple[Any, Any], target: int,
                         seconds: float, concurrency: int) -> Any:
    """A Consumer whose handler takes ``seconds``, until the processes together have
    handled ``target`` (``shared`` = a multiprocessing Value and Event)."""
    client = open_client(url)
    total, done = shared

    def render(message: rmq.Message) -> None:
        time.sleep(seconds)  # the handler's work: a render on the GPU

    def run() -> tuple[int, Counter[bytes]]:
        consumer = rmq.Consumer(client, topic, render, concurrency=concurrency).start()
        reported, tick = 0, threading.Event()
        while not done.is_set():
            tick.wait(0.01)
            handled = consumer.handled
            if handled != reported:
                with total.get_lock():
                    total.value += handled - reported
                    if total.value >= target:
                        done.set()
                reported = handled
        consumer.stop(grace=30)
        return consumer.handled, Counter()

    return run


def run(bench: Bench) -> Report:
    s, url, step = bench.sizes, bench.url, bench.progress.step
    limit, seconds = (4, 0.02) if bench.quick else (8, 0.05)
    allowed = limit / seconds
    renders = int(allowed * (2 if bench.quick else 10))
    report = Report("limits", {"max_in_flight": limit, "handler_seconds": seconds,
                               "processes": PROCESSES, "concurrency": s.concurrency,
                               "renders": renders, "claim_ack_messages": s.consume,
                               "claim_count": CLAIM}, chart=bar_chart)

    topic = "bench.limits.renders"
    bench.client.create_topic(topic)
    bench.client.set_limits(topic, max_in_flight=limit)
    time_inline(send_many_job, url, topic, Bodies(b"r", s.body_size, 0, renders), s.batch)
    label = (f"Consumers in {PROCESSES} processes, max_in_flight {limit}, "
             f"handler {seconds * 1000:g} ms")
    with step(label):
        ctx = process_context()
        shared = (ctx.Value("q", 0), ctx.Event())
        span = time_processes(limited_consumer_job,
                              [(url, topic, shared, renders, seconds, s.concurrency)]
                              * PROCESSES)
    report.add(Figure(f"N/T = {limit}/{seconds:g}s", allowed, "msg/s"))
    report.add(Figure(label, span.rate, "msg/s",
                      targets=[at_least(THROUGHPUT_RATIO * allowed, "msg/s",
                                        f"{THROUGHPUT_RATIO:g} × N/T")(span.rate)]))
    report.check("never above N/T", span.rate <= allowed * 1.02,
                 f"{span.rate:.1f} msg/s against N/T {allowed:.1f}")
    stats = bench.client.stats(topic).groups["default"]
    report.expect_equal(f"{label}: acked counter", stats.counters["acked"], renders)
    bench.fresh()

    for name, limited in ((UNLIMITED, False), (LIMITED, True)):
        topic = f"bench.limits.{'limited' if limited else 'free'}"
        bench.client.create_topic(topic)
        if limited:
            bench.client.set_limits(topic, max_in_flight=1_000_000)
        bodies = Bodies(b"l" if limited else b"f", s.body_size, 0, s.consume)
        time_inline(send_many_job, url, topic, bodies, s.batch)
        with step(name):
            span = time_inline(claim_ack_job, url, topic, CLAIM, False)
        figure = report.add(Figure(name, span.rate, "msg/s",
                                   compare=[UNLIMITED] if limited else []))
        report.expect_equal(f"{name}: acked", span.count, s.consume)
        if limited:
            ratio_at_least(report, figure, UNLIMITED, COST_RATIO)
        bench.fresh()
    return report
