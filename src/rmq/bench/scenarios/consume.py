"""``consume``: the low-level claim + ack loop and the worker runtime (``Consumer``) with a
no-op handler, threaded and async, against Redis Streams XREADGROUP + XACK. The Consumer runs
untuned (its default, adaptive prefetch: what users run), and once more with a fixed
prefetch of 2 x concurrency, to show what the adaptation gains. The claim + ack loop runs on
topics of 64 and 1024 slots too, against the same loop on the default 8 (a claim's cost
should not grow with the slot count)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import rmq

from ..context import Bench
from ..jobs import claim_ack_job, consumer_job, send_many_job, xadd_job, xconsume_job
from ..parallel import Span, process_context, time_inline, time_processes
from ..report import Figure, Report, at_least, bar_chart, ratio_at_least
from ..workload import Bodies

__all__ = ["run", "check_consumed"]

CLAIM = 100
# Targets, each a ratio to a figure of the same run:
CLAIM_RATIO = 0.6  # claim + ack against XREADGROUP + XACK
CLAIM_PIPE_RATIO = 0.8  # claim(ack=previous) against pipelined Streams
DEFAULT_RATIO = 0.5  # the default Consumer against a Streams consumer
SLOTS_RATIO = 0.9  # claim + ack on 64 or 1024 slots against 8
CLAIM_ACK_1 = "claim+ack, 1 process"
XREAD_1, XREAD_N = ("Streams XREADGROUP+XACK, 1 consumer",
                    "Streams XREADGROUP+XACK, {n} consumers")
XREAD_PIPE = "Streams XACK previous + XREADGROUP pipelined, 1 consumer"


def check_consumed(report: Report, bench: Bench, label: str, topic: str, span: Span,
                   bodies: Bodies, client: rmq.Client | None = None) -> None:
    """Every message handled exactly once (each body counted when verifying, otherwise the
    counts), and nothing left pending or in flight (read through ``client``, by default the
    bench's own)."""
    report.expect_equal(f"{label}: handled", span.count, len(bodies))
    if bench.verify:
        seen: Counter[bytes] = Counter()
        for result in span.results:
            seen.update(result[1])
        expected = set(bodies.build())
        wrong = sum(1 for body, times in seen.items() if times != 1 or body not in expected)
        report.check(f"{label}: every message consumed exactly once",
                     wrong == 0 and set(seen) == expected,
                     f"{len(seen)} distinct bodies handled of {len(expected)}, "
                     f"{wrong} handled other than once")
    stats = (client or bench.client).stats(topic).groups["default"]
    report.expect_equal(f"{label}: acked counter", stats.counters["acked"], len(bodies))
    report.expect_equal(f"{label}: left pending or in flight",
                        stats.pending + stats.in_flight, 0)


def _fill(bench: Bench, topic: str, bodies: Bodies, slots: int) -> None:
    bench.client.create_topic(topic, slots=slots)
    time_inline(send_many_job, bench.url, topic, bodies, bench.sizes.batch)


def run(bench: Bench) -> Report:
    s, url, step = bench.sizes, bench.url, bench.progress.step
    n, ctx = s.processes, process_context()
    fixed = 2 * s.concurrency  # a static prefetch, beside the adaptive default
    report = Report("consume", {"messages": s.consume, "claim_count": CLAIM,
                                "concurrency": s.concurrency, "processes": n,
                                "body_size": s.body_size, "prefetch": "default (adaptive)",
                                "fixed_prefetch": fixed}, chart=bar_chart)
    # how: "claim" (claim, then ack: two round trips a batch), "claim+ack" (each claim
    # acknowledges the previous batch: one round trip), "threads" or "async" (Consumer);
    # prefetch: the Consumer's (None: its default); ratio: the target ratio to the first
    # figure compared, if it is a target; slots: the topic's.
    variants: list[tuple[str, int, str, int | None, list[str], int | None, float | None,
                         int]] = [
        (CLAIM_ACK_1, 1, "claim", None, [XREAD_1], 100_000, CLAIM_RATIO, 8),
        ("claim acking the previous batch, 1 process", 1, "claim+ack", None, [XREAD_PIPE],
         100_000, CLAIM_PIPE_RATIO, 8),
        (f"claim+ack, {n} processes", n, "claim", None, [XREAD_N.format(n=n)], None, None, 8),
        ("claim+ack, 1 process, 64 slots", 1, "claim", None, [CLAIM_ACK_1], None,
         SLOTS_RATIO, 64),
        ("claim+ack, 1 process, 1024 slots", 1, "claim", None, [CLAIM_ACK_1], None,
         SLOTS_RATIO, 1024),
        ("Consumer threads, no-op handler, default prefetch, 1 process", 1, "threads", None,
         [XREAD_1], 50_000, DEFAULT_RATIO, 8),
        ("Consumer async, no-op handler, default prefetch, 1 process", 1, "async", None,
         [XREAD_1], None, None, 8),
        (f"Consumer threads, no-op handler, default prefetch, {n} processes", n, "threads",
         None, [XREAD_N.format(n=n)], None, DEFAULT_RATIO, 8),
        (f"Consumer threads, no-op handler, fixed prefetch {fixed}, 1 process",
         1, "threads", fixed, [XREAD_1], None, None, 8),
        (f"Consumer threads, no-op handler, fixed prefetch {fixed}, {n} processes",
         n, "threads", fixed, [XREAD_N.format(n=n)], None, None, 8),
    ]
    # The references run before and after the RMQ variants and count as their mean
    # (Report.add_bracketing says why).
    references = _references(bench, report, "before", 0)
    ratio_targets: list[tuple[Figure, str, float]] = []
    for i, (label, procs, how, prefetch, compare, target, ratio, slots) in enumerate(variants):
        topic = f"bench.consume{i}"
        bodies = Bodies(b"c%d" % i, s.body_size, 0, s.consume)
        with step(f"filling {topic} ({slots} slots) with {s.consume} messages"):
            _fill(bench, topic, bodies, slots)
        with step(label):
            if how.startswith("claim"):
                args: list[tuple[Any, ...]] = [
                    (url, topic, CLAIM, bench.verify, how == "claim+ack")] * procs
                job: Callable[..., Callable[[], Any]] = claim_ack_job
            else:
                shared = (ctx.Value("q", 0), ctx.Event())
                args = [(url, topic, shared, s.consume, s.concurrency, how == "async",
                         bench.verify, prefetch)] * procs
                job = consumer_job
            span = (time_inline(job, *args[0]) if procs == 1 else time_processes(job, args))
        figure = report.add(Figure(label, span.rate, "msg/s", compare=compare,
                                   targets=[at_least(target, "msg/s")(span.rate)] if target
                                   else []))
        if ratio is not None:
            ratio_targets.append((figure, compare[0], ratio))
        check_consumed(report, bench, label, topic, span, bodies)
        bench.fresh()

    report.add_bracketing(references, _references(bench, report, "after", 1),
                          "the RMQ figures")
    for figure, reference, factor in ratio_targets:
        ratio_at_least(report, figure, reference, factor)
    return report


def _references(bench: Bench, report: Report, when: str, round_: int) -> dict[str, float]:
    """Streams doing the consume work (1 consumer, 1 pipelined, n consumers): their rates,
    each read checked whole."""
    s, url, n = bench.sizes, bench.url, bench.sizes.processes
    rates: dict[str, float] = {}
    with bench.progress.step(f"references, {when}: Streams XREADGROUP + XACK"):
        for label, consumers, pipelined in ((XREAD_1, 1, False), (XREAD_PIPE, 1, True),
                                            (XREAD_N.format(n=n), n, False)):
            stream = f"ref{round_}:{label}"
            time_inline(xadd_job, url, stream, Bodies(b"x", s.body_size, 0, s.consume), s.batch)
            bench.redis.xgroup_create(stream, "g", id="0")
            args = [(url, stream, "g", f"c{i}", CLAIM, pipelined) for i in range(consumers)]
            span = (time_inline(xconsume_job, *args[0]) if consumers == 1
                    else time_processes(xconsume_job, args))
            report.expect_equal(f"{label} ({when}): read", span.count, s.consume)
            rates[label] = span.rate
            bench.redis.unlink(stream)
    return rates
