"""``headline``: the seed's run end to end. 5 M sends of the founding case (82 % repeat a
queued product) from several producer processes, then every pending message consumed by the
worker runtime (no-op handler) in several processes. Compared with the seed's production
figures (41 k sends/s, 40 k consumes/s) and with Redis itself doing the same work in this run:
Streams, the raw merge-enqueue Lua call, and ``redis-benchmark``."""

from __future__ import annotations

import time

from ..context import Bench
from ..jobs import (
    consumer_job,
    merge_lua_job,
    redis_benchmark,
    send_many_job,
    xadd_job,
    xconsume_job,
)
from ..parallel import process_context, time_inline, time_processes
from ..report import Figure, Report, at_least, bar_chart
from ..workload import Bodies, founding_stream
from .consume import check_consumed

__all__ = ["run"]

TOPIC = "bench.headline"
SEED_SEND, SEED_CONSUME = 41_000.0, 40_000.0
CLAIM = 100


def run(bench: Bench) -> Report:
    s, url, step = bench.sizes, bench.url, bench.progress.step
    n, ctx = s.processes, process_context()
    with step(f"building the stream of {s.headline} sends"):
        ids, distinct = founding_stream(s.headline, s.duplicate_share)
    stream = Bodies(b"product", s.body_size, ids=ids)
    report = Report("headline", {"sends": s.headline, "distinct": distinct,
                                 "duplicate_share": s.duplicate_share, "producers": n,
                                 "consumers": n, "concurrency": s.concurrency,
                                 "batch": s.batch, "reference_sends": min(s.headline,
                                                                          s.reference_cap)},
                    chart=bar_chart)
    refs = {"xadd": f"Streams XADD pipelined, {n} processes",
            "lua": f"merge-enqueue Lua, {n} processes",
            "bench_xadd": f"redis-benchmark XADD -P {s.batch} -c {n}",
            "xread": f"Streams XREADGROUP+XACK, {n} consumers",
            "seed_send": "seed: sends/s", "seed_consume": "seed: consumes/s"}
    bench.client.create_topic(TOPIC)
    started = time.perf_counter()
    with step(f"sending {s.headline} messages from {n} processes"):
        sent = time_processes(send_many_job, [(url, TOPIC, part, s.batch)
                                                             for part in stream.split(n)])
    stats = bench.group_stats(TOPIC)
    report.expect_equal("merged = sends - distinct bodies", sum(r[1] for r in sent.results),
                        s.headline - distinct)
    report.expect_equal("pending = distinct bodies", stats.pending, distinct)
    with step(f"consuming {distinct} messages with {n} worker processes"):
        shared = (ctx.Value("q", 0), ctx.Event())
        consumed = time_processes(consumer_job, [(url, TOPIC, shared, distinct, s.concurrency,
                                                  False, bench.verify)] * n)
    total = time.perf_counter() - started
    check_consumed(report, bench, "consume", TOPIC, consumed,
                   Bodies(b"product", s.body_size, 0, distinct))

    report.add(Figure(f"sends/s, {n} producer processes", sent.rate, "msg/s",
                      compare=[refs["seed_send"], refs["xadd"], refs["lua"], refs["bench_xadd"]],
                      targets=[at_least(4 * SEED_SEND, "msg/s", "4 × seed")(sent.rate)]))
    report.add(Figure(f"consumes/s, {n} worker processes, no-op handler", consumed.rate,
                      "msg/s", compare=[refs["seed_consume"], refs["xread"]],
                      targets=[at_least(2.5 * SEED_CONSUME, "msg/s", "2.5 × seed")(
                          consumed.rate)]))
    report.add(Figure("merge rate", 100 * (s.headline - stats.pending) / s.headline, "%"))
    report.add(Figure("end to end, send + consume", total, "s"))
    report.add(Figure(refs["seed_send"], SEED_SEND, "msg/s", role="seed",
                      note="the seed's production figure, not measured here"))
    report.add(Figure(refs["seed_consume"], SEED_CONSUME, "msg/s", role="seed",
                      note="the seed's production figure, not measured here"))

    bench.fresh()
    cap = min(s.headline, s.reference_cap)
    sample = Bodies(b"product", s.body_size, ids=ids[:cap])
    with step(f"references on the first {cap} sends"):
        report.add(Figure(refs["lua"], time_processes(
            merge_lua_job, [(url, "ref:z", p, s.batch) for p in sample.split(n)]).rate,
            "msg/s", role="reference"))
        report.add(Figure(refs["xadd"], time_processes(
            xadd_job, [(url, "ref:s", p, s.batch) for p in sample.split(n)]).rate,
            "msg/s", role="reference"))
        distinct_sample = Bodies(b"product", s.body_size, 0, min(distinct, cap))
        time_inline(xadd_job, url, "ref:out", distinct_sample, s.batch)
        bench.redis.xgroup_create("ref:out", "g", id="0")
        read = time_processes(xconsume_job, [(url, "ref:out", "g", f"c{i}", CLAIM)
                                             for i in range(n)])
        report.add(Figure(refs["xread"], read.rate, "msg/s", role="reference"))
        report.expect_equal("Streams consumers read every entry", read.count, len(distinct_sample))
        filler = "." * max(0, s.body_size - 20)
        report.add(Figure(refs["bench_xadd"], redis_benchmark(
            bench.server.port, cap, n, s.batch, "XADD", "ref:bench", "*", "b",
            f"product:__rand_int__|{filler}"), "msg/s", role="reference"))
    return report

