"""``replicas``: what replicated writes cost (``Client(replicas=1)``: a ``WAIT 1`` after each
write's round trip). A replica of the benchmark's server is started for this scenario, then
``send_many`` and the claim + ack loop (each claim acknowledging the previous batch) run with
``replicas=0`` and ``replicas=1`` in the same run, on the same primary with the same replica
attached: the only difference is the wait for the replica's acknowledgement."""

from __future__ import annotations

import math

from rmq.server import RedisServer, wait_until

from ..context import Bench
from ..jobs import claim_ack_job, send_many_job
from ..parallel import time_inline
from ..report import Figure, Report, bar_chart
from ..workload import Bodies

__all__ = ["run"]

CLAIM = 100
SEND_0, SEND_1 = "send_many, replicas=0", "send_many, replicas=1"
CLAIM_0, CLAIM_1 = "claim+ack, replicas=0", "claim+ack, replicas=1"


def _waits(bench: Bench) -> int:
    return int(bench.redis.info("commandstats").get("cmdstat_wait", {}).get("calls", 0))


def run(bench: Bench) -> Report:
    s, step = bench.sizes, bench.progress.step
    count = s.replicated
    report = Report("replicas", {"messages": count, "batch": s.batch, "claim": CLAIM,
                                 "replica": "one, on loopback, no persistence"},
                    chart=bar_chart)
    replica = RedisServer(appendonly=False)
    try:
        with step("starting a replica of the benchmark's server"):
            # the primary's default waits 5 s for more replicas before a diskless sync
            bench.redis.config_set("repl-diskless-sync-delay", 0)
            replica.start()
            with replica.client() as r:
                r.execute_command("REPLICAOF", "127.0.0.1", bench.server.port)
            wait_until(lambda: replica.info("replication").get("master_link_status") == "up",
                       60, "the replica linked to the benchmark's server")
        bench.client.create_topic("bench.replicas-warm-up")  # loads the library first
        bench.client.send_many("bench.replicas-warm-up", [b"warm-up"] * s.batch)
        for replicas, send_label, claim_label in ((0, SEND_0, CLAIM_0), (1, SEND_1, CLAIM_1)):
            topic = f"bench.replicas{replicas}"
            bench.client.create_topic(topic)
            bodies = Bodies(b"replicated", s.body_size, count=count)
            waits_before = _waits(bench)
            with step(f"{send_label}, {count} sends"):
                sent = time_inline(send_many_job, bench.url, topic, bodies, s.batch, None,
                                   replicas)
            report.add(Figure(send_label, sent.rate, "msg/s",
                              compare=[SEND_0] if replicas else []))
            report.expect_equal(f"{send_label}: sent", sent.count, count)
            report.expect_equal(f"{send_label}: WAITs sent (one per batch)",
                                _waits(bench) - waits_before,
                                replicas * math.ceil(count / s.batch))
            with step(f"{claim_label}, {count} messages"):
                consumed = time_inline(claim_ack_job, bench.url, topic, CLAIM, False, True,
                                       replicas)
            report.add(Figure(claim_label, consumed.rate, "msg/s",
                              compare=[CLAIM_0] if replicas else []))
            report.expect_equal(f"{claim_label}: handled", consumed.count, count)
            stats = bench.group_stats(topic)
            report.expect_equal(f"{claim_label}: left pending or in flight",
                                stats.pending + stats.in_flight, 0)
    finally:
        replica.close()
    return report
