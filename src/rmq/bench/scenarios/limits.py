"""``limits``: a group's fleet-wide limits (docs/limits.md). Throughput of Consumers in 4
processes under ``max_in_flight=N`` with handlers that take T seconds, against N/T (what the
limit allows), measured while every consumer runs (from the first tenth of the renders
finished to the last tenth, not their start and stop); and the claim + ack loop on a topic
whose group has a limit too high to bind, against the same loop without one, in the same
run, alternating (what a limit costs)."""

from __future__ import annotations

import threading
import time
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
ROUNDS = 4  # the claim + ack loops alternate, unlimited and limited, this many times each
EDGE = 0.1  # share of the renders finished before and after the steady window
UNLIMITED = "claim+ack, 1 process, no limit"
LIMITED = "claim+ack, 1 process, max_in_flight 1000000 (never binds)"


def limited_consumer_job(url: str, topic: str, shared: tuple[Any, Any], target: int,
                         seconds: float, concurrency: int) -> Any:
    """A Consumer whose handler takes ``seconds``, until the processes together have
    handled ``target`` (``shared`` = a multiprocessing Value and Event); returns how many
    it handled and when each of its handler runs ended (``time.monotonic``, one clock for
    every process of the host)."""
    client = open_client(url)
    total, done = shared
    ended: list[float] = []

    def render(message: rmq.Message) -> None:
        time.sleep(seconds)  # the handler's work: a render on the GPU
        ended.append(time.monotonic())

    def run() -> tuple[int, list[float]]:
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
        return consumer.handled, ended

    return run


def steady_rate(ends: list[float]) -> float:
    """Handler runs ended per second between the first and the last ``EDGE`` of them: while
    every consumer runs, without the processes' start and stop."""
    ends = sorted(ends)
    first, last = int(len(ends) * EDGE), int(len(ends) * (1 - EDGE))
    return (last - first) / (ends[last] - ends[first])


def run(bench: Bench) -> Report:
    s, url, step = bench.sizes, bench.url, bench.progress.step
    limit, seconds = (4, 0.02) if bench.quick else (8, 0.05)
    allowed = limit / seconds
    renders = int(allowed * (3 if bench.quick else 10))
    report = Report("limits", {"max_in_flight": limit, "handler_seconds": seconds,
                               "processes": PROCESSES, "concurrency": s.concurrency,
                               "renders": renders, "claim_ack_messages": s.consume,
                               "claim_count": CLAIM, "rounds": ROUNDS}, chart=bar_chart)

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
    rate = steady_rate([end for _, ends in span.results for end in ends])
    report.add(Figure(f"N/T = {limit}/{seconds:g}s", allowed, "msg/s"))
    report.add(Figure(label, rate, "msg/s",
                      targets=[at_least(THROUGHPUT_RATIO * allowed, "msg/s",
                                        f"{THROUGHPUT_RATIO:g} × N/T")(rate)]))
    report.add(Figure(f"{label}, start to stop", span.rate, "msg/s",
                      note="with the processes' consumers starting and stopping"))
    report.check("never above N/T", rate <= allowed * 1.02,
                 f"{rate:.1f} msg/s against N/T {allowed:.1f}")
    stats = bench.client.stats(topic).groups["default"]
    report.expect_equal(f"{label}: acked counter", stats.counters["acked"], renders)
    bench.fresh()

    topics = {False: "bench.limits.free", True: "bench.limits.limited"}
    bench.client.create_topic(topics[False])
    bench.client.create_topic(topics[True])
    bench.client.set_limits(topics[True], max_in_flight=1_000_000)
    per_round = s.consume // ROUNDS
    spent = {False: 0.0, True: 0.0}
    done = {False: 0, True: 0}
    with step(f"{UNLIMITED} / {LIMITED}, alternating"):
        for round_ in range(ROUNDS):
            for limited in (False, True) if round_ % 2 == 0 else (True, False):
                bodies = Bodies(b"l" if limited else b"f", s.body_size, round_ * per_round,
                                per_round)
                time_inline(send_many_job, url, topics[limited], bodies, s.batch)
                span = time_inline(claim_ack_job, url, topics[limited], CLAIM, False)
                spent[limited] += span.seconds
                done[limited] += span.count
    for name, limited in ((UNLIMITED, False), (LIMITED, True)):
        figure = report.add(Figure(name, done[limited] / spent[limited], "msg/s",
                                   compare=[UNLIMITED] if limited else []))
        report.expect_equal(f"{name}: acked", done[limited], per_round * ROUNDS)
        if limited:
            ratio_at_least(report, figure, UNLIMITED, COST_RATIO)
    bench.fresh()
    return report
