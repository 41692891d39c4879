"""``scale-out``: N producer and N consumer processes against the benchmark's single node and
against Redis Clusters of K masters that the scenario starts (and stops) itself, beside Redis
Streams with N processes on the single node.

Each place gets the same work on the same topic settings (``--scale-slots`` slots, so the
topic spreads over every master): N processes ``send_many`` the messages, N processes drain
them with ``claim`` + ``ack``, then, on a second topic filled the same way, N ``Consumer``
processes with a no-op handler. The rate *per master* is the cluster's aggregate rate divided
by K; its ratio to the single node is the per-master efficiency (1.0: every master added
carries a whole single node's load). The server CPU time per message, per master, shows where
the work went: a machine with fewer cores than masters plus client processes cannot keep every
master busy, so there the efficiency measures the machine as much as RMQ.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import rmq
from rmq.server import RedisServer
from rmq.server.cluster import Cluster

from ..context import Bench
from ..jobs import claim_ack_job, consumer_job, open_client, send_many_job, xadd_job, xconsume_job
from ..parallel import Span, process_context, time_processes
from ..report import Figure, Report
from ..workload import Bodies
from .consume import check_consumed

__all__ = ["run"]

TOPIC = "bench.scale-out"
STREAM = "ref:scale-out"
CLAIM = 100
SEND, CLAIM_ACK, CONSUMER = "send_many", "claim+ack", "Consumer, no-op handler"
WORKLOADS = (SEND, CLAIM_ACK, CONSUMER)
COLORS = ("#1f77b4", "#d62728", "#2ca02c")


@dataclass(frozen=True)
class Place:
    """Where the work runs: ``name`` for the figures, a URL for the worker processes, a client
    for the checks, and the servers charged with the work (every master of a cluster)."""

    name: str
    url: str
    client: rmq.Client
    nodes: Sequence[RedisServer]


@dataclass
class Measured:
    """What the three workloads did at one place: a span each, and the server CPU seconds each
    cost on every node."""

    spans: dict[str, Span]
    cpu: dict[str, list[float]]

    def cpu_us_per_message(self, workload: str) -> list[float]:
        count = self.spans[workload].count
        return [1e6 * seconds / count if count else float("nan")
                for seconds in self.cpu[workload]]


def _cpu_seconds(nodes: Sequence[RedisServer]) -> list[float]:
    infos = [node.info("cpu") for node in nodes]
    return [float(i["used_cpu_user"]) + float(i["used_cpu_sys"]) for i in infos]


@contextmanager
def _charged(nodes: Sequence[RedisServer], into: dict[str, list[float]],
             workload: str) -> Iterator[None]:
    """Record in ``into[workload]`` the CPU seconds each node spent inside the block (the
    worker processes' setup included: a few connections and reads beside the measured work)."""
    before = _cpu_seconds(nodes)
    yield
    into[workload] = [after - b for after, b in zip(_cpu_seconds(nodes), before, strict=True)]


def _send(place: Place, topic: str, bodies: Bodies, bench: Bench) -> Span:
    """Create ``topic`` with the scenario's slots and ``send_many`` ``bodies`` into it from
    N processes."""
    s = bench.sizes
    place.client.create_topic(topic, slots=s.scale_slots)
    return time_processes(send_many_job, [(place.url, topic, part, s.batch)
                                          for part in bodies.split(s.scale_processes)])


def _measure(bench: Bench, report: Report, place: Place) -> Measured:
    """The three workloads at ``place``, each checked exactly."""
    s, step, ctx = bench.sizes, bench.progress.step, process_context()
    n, total = s.scale_processes, s.scale_messages
    bodies = Bodies(b"scale", s.body_size, 0, total)
    spans: dict[str, Span] = {}
    cpu: dict[str, list[float]] = {}
    claimed, consumed = f"{TOPIC}.claim", f"{TOPIC}.consumer"

    with step(f"{place.name}: send_many of {total} messages from {_count(n, 'process')}"), \
            _charged(place.nodes, cpu, SEND):
        spans[SEND] = _send(place, claimed, bodies, bench)
    stats = place.client.stats(claimed).groups["default"]
    report.expect_equal(f"{place.name}: sent", spans[SEND].count, total)
    report.expect_equal(f"{place.name}: merged (every body distinct)",
                        sum(r[1] for r in spans[SEND].results), 0)
    report.expect_equal(f"{place.name}: ready after the sends", stats.ready, total)

    with step(f"{place.name}: claim({CLAIM}) + ack from {_count(n, 'process')}"), \
            _charged(place.nodes, cpu, CLAIM_ACK):
        spans[CLAIM_ACK] = time_processes(claim_ack_job,
                                          [(place.url, claimed, CLAIM, bench.verify)] * n)
    check_consumed(report, bench, f"{CLAIM_ACK}, {place.name}", claimed, spans[CLAIM_ACK],
                   bodies, place.client)

    with step(f"{place.name}: filling {consumed}"):
        _send(place, consumed, bodies, bench)
    with step(f"{place.name}: Consumer, no-op handler, {_count(n, 'process')}"), \
            _charged(place.nodes, cpu, CONSUMER):
        shared = (ctx.Value("q", 0), ctx.Event())
        spans[CONSUMER] = time_processes(consumer_job, [
            (place.url, consumed, shared, total, s.concurrency, False, bench.verify)] * n)
    check_consumed(report, bench, f"{CONSUMER}, {place.name}", consumed, spans[CONSUMER],
                   bodies, place.client)
    return Measured(spans, cpu)


def _streams(bench: Bench, report: Report) -> dict[str, float]:
    """Redis Streams on the single node: N processes XADD, then N consumers XREADGROUP+XACK."""
    s, url, n = bench.sizes, bench.url, bench.sizes.scale_processes
    bodies = Bodies(b"x", s.body_size, 0, s.scale_messages)
    with bench.progress.step(f"references: Streams, {_count(n, 'process')}, single node"):
        added = time_processes(xadd_job, [(url, STREAM, part, s.batch)
                                          for part in bodies.split(n)])
        bench.redis.xgroup_create(STREAM, "g", id="0")
        read = time_processes(xconsume_job, [(url, STREAM, "g", f"c{i}", CLAIM)
                                             for i in range(n)])
    report.expect_equal("Streams: entries added", bench.redis.xlen(STREAM), len(bodies))
    report.expect_equal("Streams: entries read and acknowledged", read.count, len(bodies))
    return {f"Streams XADD pipelined, {_count(n, 'process')}, 1 node": added.rate,
            f"Streams XREADGROUP+XACK, {_count(n, 'consumer')}, 1 node": read.rate}


def _on_cluster(bench: Bench, report: Report, masters: int) -> tuple[Measured, list[int]]:
    """The workloads on a cluster of ``masters`` masters started for them and stopped after;
    also returns the masters' ports."""
    with bench.progress.step(f"starting a {masters}-master cluster"):
        cluster = Cluster(masters, binary=bench.server.binary, appendonly=False).start()
    try:
        client = open_client(cluster.url)
        try:
            nodes = cluster.masters()
            place = Place(f"{masters} masters", cluster.url, client, nodes)
            return _measure(bench, report, place), [node.port for node in nodes]
        finally:
            client.close()
    finally:
        cluster.stop()


def _label(workload: str, n: int, where: str) -> str:
    who = "producer" if workload == SEND else "process"
    return f"{workload}, {_count(n, who)}, {where}"


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" if n == 1 else f"{n} {noun}es" if noun.endswith("s") else f"{n} {noun}s"


def _add_figures(report: Report, n: int, single: Measured, clusters: dict[int, Measured],
                 streams: dict[str, float]) -> None:
    xadd, xread = list(streams)  # the names, in the order _streams measured them
    for workload in WORKLOADS:
        reference = xadd if workload == SEND else xread
        base = _label(workload, n, "1 node")
        report.add(Figure(base, single.spans[workload].rate, "msg/s", compare=[reference]))
        for k, measured in clusters.items():
            rate = measured.spans[workload].rate
            report.add(Figure(_label(workload, n, f"{k} masters"), rate, "msg/s",
                              compare=[base, reference]))
            report.add(Figure(f"per master, {workload}, {k} masters", rate / k, "msg/s",
                              compare=[base], note="aggregate / masters; the ratio to the "
                                                   "single node is the per-master efficiency"))
    for name, rate in streams.items():
        report.add(Figure(name, rate, "msg/s", role="reference"))
    for workload in WORKLOADS:
        base = f"server CPU per message, {workload}, 1 node"
        report.add(Figure(base, single.cpu_us_per_message(workload)[0], "µs", role="server"))
        for k, measured in clusters.items():
            per_master = measured.cpu_us_per_message(workload)
            report.add(Figure(
                f"server CPU per message, {workload}, {k} masters (sum)", sum(per_master), "µs",
                role="server", compare=[base],
                note="per master: " + ", ".join(f"{us:.2f}" for us in per_master)))


def _chart(report: Report, ax: Any) -> None:
    """Aggregate rate against masters (the single node at 1), one line per workload, dotted
    lines for linear scaling, the Streams references as grey lines; under each cluster its
    per-master efficiency per workload."""
    series = report.series
    xs = [1, *series["masters"]]
    top = max(*series["streams"].values(), *(r for rates in series["rates"].values()
                                              for r in rates))
    for workload, color in zip(WORKLOADS, COLORS, strict=True):
        rates = [rate / 1000 for rate in series["rates"][workload]]
        ax.plot(xs, rates, marker="o", color=color, label=workload)
        ax.plot(xs, [rates[0] * x for x in xs], linestyle=":", linewidth=1, color=color)
    for (name, rate), style in zip(series["streams"].items(), ("--", "-."), strict=True):
        ax.axhline(rate / 1000, linestyle=style, linewidth=1, color="#888888",
                   label=f"[ref] {name}")
    efficiency = [" / ".join(f"{series['efficiency'][w][i]:.2f}×" for w in WORKLOADS)
                  for i in range(len(series["masters"]))]
    ax.set_xticks(xs, ["1 node", *[f"{k} masters\n{e}" for k, e in
                                   zip(series["masters"], efficiency, strict=True)]],
                  fontsize=8)
    ax.set_xlabel("per master, as a share of the 1-node rate: " + " / ".join(WORKLOADS),
                  fontsize=8)
    ax.set_ylim(0, 1.25 * top / 1000)
    ax.set_ylabel("thousand messages/s, all processes together")
    n = report.params["processes"]
    ax.set_title(f"rmq bench: scale-out, {_count(n, 'producer')} and "
                 f"{_count(n, 'consumer')} (dotted: linear from 1 node)")
    ax.legend(fontsize=8, loc="upper left")


def run(bench: Bench) -> Report:
    s = bench.sizes
    n, masters = s.scale_processes, list(s.scale_masters)
    report = Report("scale-out", {"messages": s.scale_messages, "processes": n,
                                  "masters": masters, "slots": s.scale_slots,
                                  "claim_count": CLAIM, "concurrency": s.concurrency,
                                  "batch": s.batch, "body_size": s.body_size}, chart=_chart)
    place = Place("1 node", bench.url, bench.client, [bench.server])
    single = _measure(bench, report, place)
    bench.fresh()
    streams = _streams(bench, report)
    bench.fresh()
    clusters: dict[int, Measured] = {}
    ports: dict[int, list[int]] = {}
    for k in masters:
        clusters[k], ports[k] = _on_cluster(bench, report, k)
    report.params["cluster_ports"] = ports
    _add_figures(report, n, single, clusters, streams)
    report.series = _series(single, clusters, streams)
    return report


def _series(single: Measured, clusters: dict[int, Measured],
            streams: dict[str, float]) -> dict[str, Any]:
    def rate(measured: Measured, workload: str) -> float:
        return measured.spans[workload].rate

    return {
        "masters": list(clusters),
        "rates": {w: [rate(single, w), *(rate(m, w) for m in clusters.values())]
                  for w in WORKLOADS},
        "efficiency": {w: [rate(m, w) / k / rate(single, w) for k, m in clusters.items()]
                       for w in WORKLOADS},
        "streams": streams,
        "server_cpu_us_per_message": {
            "1 node": {w: single.cpu_us_per_message(w) for w in WORKLOADS},
            **{f"{k} masters": {w: m.cpu_us_per_message(w) for w in WORKLOADS}
               for k, m in clusters.items()}},
    }
