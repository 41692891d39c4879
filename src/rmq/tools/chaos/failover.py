"""The Redis Cluster failover scenario: a master SIGKILLed mid-run, its replica promoted.

Redis replicates asynchronously: a master acknowledges a write before its replica has it,
so a write acknowledged in the last moments before the master dies can be missing on the
replica that takes over. This scenario measures that window instead of assuming it away:
its ledger may show *missing* messages, and only those may be missing that lived in hash
slots of the killed master (``lost_outside_victim`` must stay 0). Whatever else the ledger
says must hold as on a single node.
"""

from __future__ import annotations

import binascii
import time
import zlib

from ..servers.cluster import Cluster
from .scenarios import Outcome, Stage, outages

__all__ = ["master_failover"]

_SLOTS = 16384


def _hash_slot(key: str) -> int:
    """Redis Cluster's hash slot of ``key`` (CRC16/XMODEM of its hash tag)."""
    start = key.find("{")
    if start >= 0:
        end = key.find("}", start + 1)
        if end > start + 1:
            key = key[start + 1 : end]
    return binascii.crc_hqx(key.encode(), 0) % _SLOTS


def _served_slots(cluster: Cluster, port: int) -> set[int]:
    """The hash slots the master on ``port`` serves now."""
    with cluster.masters()[0].client() as c:
        ranges = c.cluster("slots")
    return {slot for start, end, master, *_ in ranges if master[1] == port
            for slot in range(start, end + 1)}


def master_failover(stage: Stage, cluster: Cluster, size: int = 3000, batch: int = 1,
                    topic_slots: int = 8) -> Outcome:
    """SIGKILL one master while producers and consumer processes run; the cluster promotes
    its replica. Reports what was lost (``figures['lost']``) and where."""
    if cluster.replicas < 1:
        raise ValueError("master_failover needs a cluster with at least one replica per master")
    masters = cluster.masters()
    victim, seed = masters[0], masters[-1]
    victim_slots = _served_slots(cluster, victim.port)
    detected: list[float] = []

    def crash() -> None:
        victim.kill()

    def promote() -> None:
        began = time.monotonic()
        cluster.failover_wait()
        detected.append(time.monotonic() - began)

    outcome = outages(stage, "failover", size, seed.url, seed.url, [(crash, promote)], batch,
                      tolerate_missing=True)
    topic = "chaos-failover"
    on_victim = {s for s in range(topic_slots) if _hash_slot(f"{{{topic}:{s}}}") in victim_slots}
    lost_elsewhere = [b for b in outcome.ledger.missing_bodies
                      if zlib.crc32(b) & (topic_slots - 1) not in on_victim]
    outcome.figures.update({"failover_s": detected, "lost": outcome.ledger.missing,
                            "topic_slots_on_victim": sorted(on_victim),
                            "lost_outside_victim": len(lost_elsewhere)})
    if lost_elsewhere:
        outcome.problems.append(f"lost messages of slots the killed master did not serve: "
                                f"{lost_elsewhere[:10]}")
    return outcome
