"""``batch``: batch handlers (docs/semantics.md, "Batch handlers"). A no-op batch handler of
100 against the low-level ``claim(100)`` + ``ack`` loop in the same run, alternating (what
the batch runtime costs over the loop it replaces); and the GPU's shape: a handler costing
50 ms + 1 ms a message under ``max_batches=4`` (consumers in 2 processes, more workers than
the limit), in batches of 32 against batches of 1, each draining a backlog, with the most
handler runs seen at once checked against the limit."""

from __future__ import annotations

import threading
import time
from typing import Any

import rmq

from ..context import Bench
from ..jobs import COUNT_EVERY, claim_ack_job, open_client, send_many_job
from ..parallel import process_context, time_inline, time_processes
from ..report import Figure, Report, at_least, bar_chart, ratio_at_least
from ..workload import Bodies

__all__ = ["run"]

CLAIM = 100
ROUNDS = 4  # the no-op runs alternate, loop and batch consumer, this many times each
NOOP_RATIO = 0.9  # a no-op batch consumer against claim(100) + ack
GPU_SPEEDUP = 8.0  # batches of 32 against batches of 1, under the same max_batches
GPU_BATCH, GPU_LIMIT, GPU_PROCESSES, GPU_CONCURRENCY = 32, 4, 2, 4
BASE_S, PER_MESSAGE_S = 0.05, 0.001  # a GPU call: a fixed cost, and one per image
LOOP = f"claim({CLAIM}) + ack, 1 process"
NOOP = f"Consumer(batch={CLAIM}), no-op handler, 1 process"


def noop_batch_job(url: str, topic: str, target: int, size: int, concurrency: int
                   ) -> Any:
    """A batch consumer with a no-op handler until it has handled ``target`` messages;
    returns how many it handled and the seconds from its start to then."""
    client = open_client(url)

    def render(messages: list[rmq.Message]) -> None:
        pass

    def run() -> tuple[int, float]:
        started, tick = time.perf_counter(), threading.Event()
        consumer = rmq.Consumer(client, topic, render, batch=size, concurrency=concurrency,
                                heartbeat_interval=60).start()
        while consumer.handled < target:
            tick.wait(COUNT_EVERY)
        seconds = time.perf_counter() - started
        consumer.stop()
        return consumer.handled, seconds

    return run


def gpu_batch_job(url: str, topic: str, shared: tuple[Any, Any], target: int, size: int,
                  concurrency: int) -> Any:
    """A batch consumer whose handler costs ``BASE_S + PER_MESSAGE_S`` a message, until the
    processes together have handled ``target`` (``shared`` = a multiprocessing Value and
    Event); returns how many it handled and each handler run's (start, end)
    (``time.monotonic``: one clock for every process of the host)."""
    client = open_client(url)
    total, done = shared
    runs: list[tuple[float, float]] = []

    def render(messages: list[rmq.Message]) -> None:
        began = time.monotonic()
        time.sleep(BASE_S + PER_MESSAGE_S * len(messages))  # the GPU's work
        runs.append((began, time.monotonic()))

    def run() -> tuple[int, list[tuple[float, float]]]:
        consumer = rmq.Consumer(client, topic, render, batch=size, concurrency=concurrency,
                                heartbeat_interval=60).start()
        reported, tick = 0, threading.Event()
        while not done.is_set():
            tick.wait(COUNT_EVERY)
            handled = consumer.handled
            if handled != reported:
                with total.get_lock():
                    total.value += handled - reported
                    if total.value >= target:
                        done.set()
                reported = handled
        consumer.stop(grace=30)
        return consumer.handled, runs

    return run


def most_at_once(runs: list[tuple[float, float]]) -> int:
    """The most handler runs under way at one moment."""
    edges = sorted([(start, 1) for start, _ in runs] + [(end, -1) for _, end in runs])
    at_once = most = 0
    for _, step in edges:
        at_once += step
        most = max(most, at_once)
    return most


def _noop(bench: Bench, report: Report) -> None:
    s, url = bench.sizes, bench.url
    topics = {False: "bench.batch.loop", True: "bench.batch.consumer"}
    for topic in topics.values():
        bench.client.create_topic(topic)
    per_round = s.consume // ROUNDS
    spent = {False: 0.0, True: 0.0}
    done = {False: 0, True: 0}
    with bench.progress.step(f"{LOOP} / {NOOP}, alternating"):
        for round_ in range(ROUNDS):
            for batched in (False, True) if round_ % 2 == 0 else (True, False):
                bodies = Bodies(b"b" if batched else b"l", s.body_size, round_ * per_round,
                                per_round)
                time_inline(send_many_job, url, topics[batched], bodies, s.batch)
                if batched:
                    span = time_inline(noop_batch_job, url, topics[batched], per_round, CLAIM,
                                       1)
                    count, seconds = span.results[0]
                else:
                    span = time_inline(claim_ack_job, url, topics[batched], CLAIM, False)
                    count, seconds = span.count, span.seconds
                spent[batched] += seconds
                done[batched] += count
    for name, batched in ((LOOP, False), (NOOP, True)):
        figure = report.add(Figure(name, done[batched] / spent[batched], "msg/s",
                                   compare=[LOOP] if batched else []))
        report.expect_equal(f"{name}: handled", done[batched], per_round * ROUNDS)
        stats = bench.client.stats(topics[batched]).groups["default"]
        report.expect_equal(f"{name}: acked counter", stats.counters["acked"],
                            per_round * ROUNDS)
        if batched:
            ratio_at_least(report, figure, LOOP, NOOP_RATIO)
    bench.fresh()


def _gpu(bench: Bench, report: Report) -> None:
    s, url = bench.sizes, bench.url
    drained = {GPU_BATCH: 300 if bench.quick else 10_000, 1: 60 if bench.quick else 1_000}
    rates: dict[int, float] = {}
    for size, messages in drained.items():
        topic = f"bench.batch.gpu{size}"
        bench.client.create_topic(topic)
        bench.client.set_limits(topic, max_batches=GPU_LIMIT)
        time_inline(send_many_job, url, topic, Bodies(b"g", s.body_size, 0, messages),
                    s.batch)
        label = _gpu_label(size)
        with bench.progress.step(f"{label}: draining {messages}"):
            ctx = process_context()
            shared = (ctx.Value("q", 0), ctx.Event())
            span = time_processes(gpu_batch_job, [(url, topic, shared, messages, size,
                                                   GPU_CONCURRENCY)] * GPU_PROCESSES)
        rates[size] = span.rate
        runs = [r for _, each in span.results for r in each]
        report.add(Figure(label, span.rate, "msg/s",
                          compare=[] if size == 1 else [_gpu_label(1)],
                          note=f"{messages} messages drained in {span.seconds:.1f} s"))
        most = most_at_once(runs)
        report.check(f"{label}: at most {GPU_LIMIT} batches at once", most <= GPU_LIMIT,
                     f"at most {most} handler runs at once")
        stats = bench.client.stats(topic).groups["default"]
        report.expect_equal(f"{label}: acked counter", stats.counters["acked"], messages)
        bench.fresh()
    speedup = rates[GPU_BATCH] / rates[1]
    report.add(Figure(f"batches of {GPU_BATCH} against batches of 1, drain rate", speedup,
                      "x", targets=[at_least(GPU_SPEEDUP, "x")(speedup)],
                      note="the same limit of 4 batches in flight"))


def _gpu_label(size: int) -> str:
    return (f"batches of {size}, max_batches {GPU_LIMIT}, handler {BASE_S * 1000:g} ms + "
            f"{PER_MESSAGE_S * 1000:g} ms a message, {GPU_PROCESSES} processes × "
            f"{GPU_CONCURRENCY}")


def run(bench: Bench) -> Report:
    report = Report("batch", {"messages": bench.sizes.consume, "claim_count": CLAIM,
                              "rounds": ROUNDS, "gpu_batch": GPU_BATCH,
                              "gpu_max_batches": GPU_LIMIT, "gpu_processes": GPU_PROCESSES,
                              "gpu_concurrency": GPU_CONCURRENCY,
                              "gpu_handler_ms": [BASE_S * 1000, PER_MESSAGE_S * 1000]},
                    chart=bar_chart)
    _noop(bench, report)
    _gpu(bench, report)
    return report
