"""``merge``: the founding case. A Zipf-skewed stream of product updates in which 82 % of the
sends repeat a product already queued; nothing is consumed meanwhile, so exactly the repeats
merge. Reports sends/s and the merge rate, against the raw merge-enqueue Lua call (which merges
too) and Streams XADD (which cannot)."""

from __future__ import annotations

from ..context import Bench
from ..jobs import merge_lua_job, send_many_job, xadd_job
from ..parallel import Span, time_inline, time_processes
from ..report import Figure, Report, bar_chart
from ..workload import Bodies, founding_stream

__all__ = ["run"]

LUA_1, LUA_N = "merge-enqueue Lua, 1 process", "merge-enqueue Lua, {n} processes"
XADD_1 = "Streams XADD pipelined, 1 process (no merging)"


def _check_merged(report: Report, what: str, span: Span, distinct: int) -> None:
    merged = sum(result[1] for result in span.results)
    report.expect_equal(f"{what}: merged = sends - distinct bodies", merged,
                        span.count - distinct)


def run(bench: Bench) -> Report:
    s, url, step = bench.sizes, bench.url, bench.progress.step
    n = s.processes
    with step(f"building the stream of {s.merge} sends"):
        ids, distinct = founding_stream(s.merge, s.duplicate_share)
    stream = Bodies(b"product", s.body_size, ids=ids)
    report = Report("merge", {"sends": s.merge, "distinct": distinct,
                              "duplicate_share": s.duplicate_share, "zipf_skew": 1.1,
                              "batch": s.batch, "processes": n}, chart=bar_chart)

    for label, topic, procs in (("1 process", "bench.merge1", 1),
                                (f"{n} processes", "bench.merge2", n)):
        bench.client.create_topic(topic)
        with step(f"send_many, {label}, {s.merge} sends"):
            if procs == 1:
                span = time_inline(send_many_job, url, topic, stream, s.batch)
            else:
                span = time_processes(send_many_job, [(url, topic, part, s.batch)
                                                      for part in stream.split(procs)])
        compare = [LUA_1, XADD_1] if procs == 1 else [LUA_N.format(n=n)]
        report.add(Figure(f"send_many with merging, {label}", span.rate, "msg/s",
                          compare=compare))
        _check_merged(report, f"send_many, {label}", span, distinct)
        stats = bench.group_stats(topic)
        report.expect_equal(f"{label}: pending = distinct bodies", stats.ready, distinct)
        report.expect_equal(f"{label}: merged counter", stats.counters["merged"],
                            s.merge - distinct)
        if procs == 1:
            rate = 100 * stats.counters["merged"] / max(1, stats.counters["sent"])
            report.add(Figure("merge rate", rate, "%",
                              note=f"{distinct} distinct of {s.merge} sends"))

    bench.fresh()
    with step("references: merge-enqueue Lua, Streams XADD"):
        lua = time_inline(merge_lua_job, url, "ref:z1", stream, s.batch)
        report.add(Figure(LUA_1, lua.rate, "msg/s", role="reference"))
        _check_merged(report, LUA_1, lua, distinct)
        lua_n = time_processes(merge_lua_job, [(url, "ref:zn", part, s.batch)
                                               for part in stream.split(n)])
        report.add(Figure(LUA_N.format(n=n), lua_n.rate, "msg/s", role="reference"))
        _check_merged(report, LUA_N.format(n=n), lua_n, distinct)
        report.add(Figure(XADD_1, time_inline(xadd_job, url, "ref:s", stream, s.batch).rate,
                          "msg/s", role="reference"))
    return report
