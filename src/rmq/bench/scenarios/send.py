"""``send``: ``send`` one at a time and ``send_many`` batches of distinct bodies, from one and
from several processes, against Redis Streams XADD and the raw merge-enqueue Lua call."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..context import Bench
from ..jobs import (
    enqueue_one_job,
    merge_lua_job,
    send_many_job,
    send_one_job,
    send_tasks_job,
    send_threads_job,
    xadd_job,
    xadd_one_job,
)
from ..parallel import time_inline, time_processes
from ..report import Figure, Report, at_least, bar_chart, ratio_at_least
from ..workload import Bodies

__all__ = ["run"]

TOPIC = "bench.send"
XADD_1, XADD_N = "Streams XADD pipelined, 1 process", "Streams XADD pipelined, {n} processes"
LUA_1, LUA_N = "merge-enqueue Lua, 1 process", "merge-enqueue Lua, {n} processes"
XADD_ONE = "Streams XADD one at a time"
# RMQ's enqueue.lua one call per message through bare redis-py: single sends' floor, so the
# figure shows how much of their gap to XADD is the script and how much RMQ's client.
ENQUEUE_ONE = "enqueue.lua one at a time, bare redis-py"
THREADS, TASKS = 32, 512  # concurrent senders on one client: group commit (group_commit.py)


def run(bench: Bench) -> Report:
    s, url, step = bench.sizes, bench.url, bench.progress.step
    n = procs = s.processes
    report = Report("send", {"messages": s.send, "single_sends": s.send_single,
                             "batch": s.batch, "body_size": s.body_size, "processes": procs},
                    chart=bar_chart)
    bench.client.create_topic(TOPIC)
    expected = 0

    # one thread, then concurrent senders sharing one client (group commit)
    singles: list[tuple[str, bytes, Callable[..., Callable[[], Any]], tuple[int, ...]]] = [
        ("send, one at a time", b"one", send_one_job, ()),
        (f"send, one at a time, {THREADS} threads", b"threads", send_threads_job, (THREADS,)),
        (f"send, one at a time, {TASKS} asyncio tasks", b"tasks", send_tasks_job, (TASKS,)),
    ]
    # The one-at-a-time references run before and after the single sends and count as their
    # mean (Report.add_bracketing says why).
    references = _one_at_a_time_references(bench, report, "before")
    figures = []
    for label, tag, job, extra in singles:
        with step(f"{label}, {s.send_single} messages"):
            span = time_inline(job, url, TOPIC, Bodies(tag, s.body_size, 0, s.send_single),
                               *extra)
        expected += span.count
        figures.append(report.add(Figure(label, span.rate, "msg/s",
                                         compare=[XADD_ONE, ENQUEUE_ONE],
                                         targets=[at_least(40_000, "msg/s")(span.rate)])))

    report.add_bracketing(references, _one_at_a_time_references(bench, report, "after"),
                          "the single sends")
    ratio_at_least(report, figures[0], XADD_ONE, 0.8)  # one thread's

    with step(f"send_many, 1 process, {s.send} messages"):
        span = time_inline(send_many_job, url, TOPIC, Bodies(b"many", s.body_size, 0, s.send),
                           s.batch)
    expected += span.count
    many_1 = report.add(Figure("send_many, 1 process", span.rate, "msg/s",
                               compare=[XADD_1, LUA_1],
                               targets=[at_least(150_000, "msg/s")(span.rate)]))

    with step(f"send_many, {procs} processes"):
        parts = Bodies(b"multi", s.body_size, 0, s.send).split(procs)
        span = time_processes(send_many_job, [(url, TOPIC, p, s.batch) for p in parts])
    expected += span.count
    report.add(Figure(f"send_many, {n} processes", span.rate, "msg/s",
                      compare=[XADD_N.format(n=n), LUA_N.format(n=n)]))

    stats = bench.group_stats(TOPIC)
    report.expect_equal("every distinct send is pending", stats.ready, expected)
    report.expect_equal("nothing merged among distinct bodies", stats.counters["merged"], 0)
    report.expect_equal("sent counter", stats.counters["sent"], expected)

    bench.fresh()
    with step("references: Streams XADD, merge-enqueue Lua"):
        bodies = Bodies(b"ref", s.body_size, 0, s.send)
        report.add(Figure(XADD_1, time_inline(xadd_job, url, "ref:s1", bodies, s.batch).rate,
                          "msg/s", role="reference"))
        report.add(Figure(XADD_N.format(n=n), time_processes(
            xadd_job, [(url, "ref:sn", p, s.batch) for p in bodies.split(procs)]).rate,
            "msg/s", role="reference"))
        lua = time_inline(merge_lua_job, url, "ref:z1", bodies, s.batch)
        report.add(Figure(LUA_1, lua.rate, "msg/s", role="reference"))
        lua_n = time_processes(merge_lua_job, [(url, "ref:zn", p, s.batch)
                                               for p in bodies.split(procs)])
        report.add(Figure(LUA_N.format(n=n), lua_n.rate, "msg/s", role="reference"))
    report.expect_equal("merge-enqueue Lua merged nothing", lua.results[0][1], 0)
    ratio_at_least(report, many_1, XADD_1, 0.75)
    return report


def _one_at_a_time_references(bench: Bench, report: Report, when: str) -> dict[str, float]:
    """Streams ``XADD`` and RMQ's ``enqueue.lua``, one call per message: their rates, each
    checked to have stored every message."""
    s, url = bench.sizes, bench.url
    topic, stream = f"{TOPIC}.lua.{when}", f"ref:one:{when}"
    with bench.progress.step(f"references, {when}: Streams XADD and enqueue.lua one at a time"):
        xadd = time_inline(xadd_one_job, url, stream,
                           Bodies(b"one-" + when.encode(), s.body_size, 0, s.send_single))
        bench.client.create_topic(topic)
        enqueue = time_inline(enqueue_one_job, url, topic,
                              Bodies(b"lua-" + when.encode(), s.body_size, 0, s.send_single))
    report.expect_equal(f"XADD one at a time ({when}) stored each", bench.redis.xlen(stream),
                        xadd.count)
    report.expect_equal(f"enqueue.lua one at a time ({when}) merged nothing",
                        enqueue.results[0][1], 0)
    report.expect_equal(f"enqueue.lua one at a time ({when}) stored each",
                        bench.client.stats(topic).groups["default"].ready, enqueue.count)
    return {XADD_ONE: xadd.rate, ENQUEUE_ONE: enqueue.rate}
