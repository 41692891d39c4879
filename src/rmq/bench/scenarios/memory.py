"""``memory``: Redis bytes per pending message, by kind, for 100-byte bodies, against a bare
``ZADD`` of the same bodies into one zset; each measured as the ``INFO memory`` ``used_memory``
delta of storing N messages, in the same run."""

from __future__ import annotations

from typing import Any

import rmq

from ..context import Bench
from ..report import Figure, Report, Target, bar_chart
from ..workload import make_bodies

__all__ = ["run"]

BARE = "bare ZADD of the same bodies"
HOUR_MS = 3_600_000


def _kinds(body: bytes, n: int) -> dict[str, Any]:
    return {
        "plain": body,
        "priority": {"body": body, "priority": rmq.Priority.HIGH},
        "delayed": {"body": body, "delay_ms": HOUR_MS},
        "keyed": {"body": body, "key": b"merchant:%06d" % (n % 1000)},
    }


def _chart(report: Report, ax: Any) -> None:
    bar_chart(report, ax, unit="B/msg")
    ax.axvline(report.params["body_size"], color="black", linestyle=":", label="body size")
    ax.legend(fontsize=8)


def run(bench: Bench) -> Report:
    s, client, step = bench.sizes, bench.client, bench.progress.step
    report = Report("memory", {"messages_per_kind": s.memory, "body_size": s.body_size},
                    chart=_chart)
    bodies = make_bodies(b"mem", 0, s.memory, s.body_size)
    client.create_topic("bench.warmup")
    client.send("bench.warmup", b"loads the scripts before anything is measured")
    for kind in _kinds(b"", 0):
        topic = f"bench.memory.{kind}"
        client.create_topic(topic)
        items = [_kinds(body, n)[kind] for n, body in enumerate(bodies)]
        with step(f"{kind}: {s.memory} messages"):
            before = bench.used_memory()
            for i in range(0, len(items), s.batch):
                client.send_many(topic, items[i:i + s.batch])
            after = bench.used_memory()
        report.add(Figure(f"{kind}, per pending message", (after - before) / s.memory, "B/msg",
                          compare=[BARE]))
        stats = bench.group_stats(topic)
        report.expect_equal(f"{kind}: pending", stats.pending, s.memory)
    with step(f"bare ZADD: {s.memory} bodies"):
        before = bench.used_memory()
        for i in range(0, len(bodies), s.batch):
            pipe = bench.redis.pipeline(transaction=False)
            for n, body in enumerate(bodies[i:i + s.batch], start=i):
                pipe.zadd("ref:bare", {body: n})
            pipe.execute()
        after = bench.used_memory()
    report.add(Figure(BARE, (after - before) / s.memory, "B/msg", role="reference"))
    report.expect_equal("bare ZADD: members", bench.redis.zcard("ref:bare"), s.memory)
    base = report.figure(BARE).value
    for fig in report.figures:
        if fig.role == "rmq":
            fig.targets.append(Target(f"≤ 1.15 × bare ZADD ({1.15 * base:.0f} B/msg)",
                                      fig.value <= 1.15 * base))
    return report
