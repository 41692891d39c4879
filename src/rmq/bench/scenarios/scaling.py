"""``scaling``: what a send and a claim cost as the backlog grows (10 k to 1 M pending, 10 M with
``--scaling-max 10000000``). Zset operations are O(log n), so the cost should barely move while
the backlog grows a hundredfold; linear growth would multiply it by the same hundred.

At each size the backlog is filled with distinct messages, then each operation runs
``scaling_rounds`` times and its median per message is reported. Sends and claims balance, so
the backlog stays at the size it is measured at.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from ..context import Bench
from ..jobs import MERGE_ENQUEUE_LUA, send_many_job
from ..parallel import time_inline
from ..report import Figure, Report, Target
from ..workload import Bodies, make_bodies

__all__ = ["run"]

TOPIC = "bench.scaling"
BATCH = 100
FILL_CHUNK = 500_000
OPS = ("send_many(100), per message", "send, one message", "claim(100)+ack, per message",
       "claim(1)+ack, one message", "merge-enqueue Lua(100), per message")


def _fill(bench: Bench, start: int, end: int) -> None:
    """Add messages ``start`` to ``end`` to the topic and, the same bodies, to the raw zset."""
    fill = Bodies(b"fill", bench.sizes.body_size, start, end - start)
    time_inline(send_many_job, bench.url, TOPIC, fill, bench.sizes.batch)
    bodies = fill.build()
    for i in range(0, len(bodies), 10_000):
        bench.redis.zadd("ref:scaling", {b: start + i + j
                                         for j, b in enumerate(bodies[i:i + 10_000])})
    if end - start == FILL_CHUNK:
        bench.progress.say(f"  {end:,} pending")


def _median_us(rounds: int, per_call: int, action: Callable[[int], Any]) -> float:
    times = []
    for i in range(rounds):
        start = time.perf_counter()
        action(i)
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6 / per_call


def _measure(bench: Bench, size: int, lua: Any) -> tuple[dict[str, float], int]:
    """Median cost of each operation at the current backlog; returns it and how many messages
    the claims took (as many as the sends added)."""
    s, client = bench.sizes, bench.client
    rounds, tag = s.scaling_rounds, b"at%d" % size
    many = [make_bodies(tag + b"m%d" % r, 0, BATCH, s.body_size) for r in range(rounds)]
    one = make_bodies(tag + b"one", 0, rounds, s.body_size)
    raw = [make_bodies(tag + b"lua%d" % r, 0, BATCH, s.body_size) for r in range(rounds)]
    claimed = [0]

    def claim_ack(count: int) -> None:
        messages = client.claim(TOPIC, count=count)
        client.ack(messages)
        claimed[0] += len(messages)

    costs = {
        OPS[0]: _median_us(rounds, BATCH, lambda r: client.send_many(TOPIC, many[r])),
        OPS[1]: _median_us(rounds, 1, lambda r: client.send(TOPIC, one[r])),
        OPS[2]: _median_us(rounds, BATCH, lambda r: claim_ack(BATCH)),
        OPS[3]: _median_us(rounds, 1, lambda r: claim_ack(1)),
        OPS[4]: _median_us(rounds, BATCH, lambda r: lua(keys=["ref:scaling"],
                                                        args=[size, *raw[r]])),
    }
    return costs, claimed[0]


def _chart(report: Report, ax: Any) -> None:
    sizes = report.params["backlogs"]
    for op in OPS:
        ax.plot(sizes, report.series[op], marker="o", label=op)
    ax.set_xscale("log")
    ax.set_xlabel("pending messages (log scale)")
    ax.set_ylabel("µs (median)")
    ax.set_ylim(bottom=0)
    ax.set_title("rmq bench: cost against backlog size")
    ax.legend(fontsize=8)


def run(bench: Bench) -> Report:
    s, client, step = bench.sizes, bench.client, bench.progress.step
    report = Report("scaling", {"backlogs": list(s.scaling), "rounds": s.scaling_rounds,
                                "batch": BATCH, "body_size": s.body_size}, chart=_chart)
    client.create_topic(TOPIC)
    lua = bench.redis.register_script(MERGE_ENQUEUE_LUA)
    series: dict[str, list[float]] = {op: [] for op in OPS}
    backlog = claimed = 0
    for size in s.scaling:
        with step(f"filling the backlog to {size:,}"):
            for start in range(backlog, size, FILL_CHUNK):
                _fill(bench, start, min(size, start + FILL_CHUNK))
            backlog = size
        with step(f"measuring at {size:,} pending"):
            costs, claimed_here = _measure(bench, size, lua)
        claimed += claimed_here
        for op, us in costs.items():
            series[op].append(us)
            report.add(Figure(f"{op} at {size:,} pending", us, "µs",
                              role="reference" if op == OPS[4] else "rmq",
                              compare=[f"{OPS[4]} at {size:,} pending"] if op == OPS[0] else []))
        stats = bench.group_stats(TOPIC)
        report.expect_equal(f"pending at {size:,}", stats.pending, size)
        report.expect_equal(f"acked after {size:,}", stats.counters["acked"], claimed)
    report.series = series
    _growth(report, series, s.scaling)
    return report


def _growth(report: Report, series: dict[str, list[float]], sizes: tuple[int, ...]) -> None:
    if len(sizes) < 2 or not sizes[0]:
        return
    grew = sizes[-1] / sizes[0]
    for op in OPS[:4]:
        factor = series[op][-1] / series[op][0]
        report.add(Figure(f"{op}: cost growth from {sizes[0]:,} to {sizes[-1]:,} pending",
                          factor, "×", targets=[Target(
                              f"< 2× while the backlog grew {grew:,.0f}× (linear: {grew:,.0f}×)",
                              factor < 2)]))
