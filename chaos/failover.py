"""The Redis Cluster failover scenario: a master SIGKILLed mid-run, its replica promoted.

Redis replicates asynchronously: a master acknowledges a write before its replica has it,
so a write acknowledged in the last moments before the master dies can be missing on the
replica that takes over. This scenario measures that window instead of assuming it away:
its ledger may show *missing* messages, and only those may be missing that lived in hash
slots of the killed master (``lost_outside_victim`` must stay 0). Whatever else the ledger
says must hold as on a single node.

The loss measured is of messages, not of the topic: its registry entry is written like any
key (and ``{chaos-failover}`` hashes to the killed master's slots), so the scenario waits
for the replicas to hold it before any fault. It records each node's replication state at
the kill (``replication_at_kill``) and which node took over (``promoted``), so a failure
says whether the dead master's replica was linked and how far behind it was.
"""

from __future__ import annotations

import binascii
import contextlib
import time
import zlib
from pathlib import Path

from rmq.server.cluster import Cluster, NodeReplication, describe_replication

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


def _server_of(cluster: Cluster, slot: int) -> int | None:
    """The port of the master that serves ``slot`` now."""
    with cluster.masters()[0].client() as c:
        ranges = c.cluster("slots")
    return next((master[1] for start, end, master, *_ in ranges if start <= slot <= end), None)


# What a node's log says about replication and failover: read when the scenario fails.
_EVENTS = ("MASTER <-> REPLICA", "resync", "ailover", "FAIL", "Configuration change",
           "Connection with master", "Cluster state changed", "Connecting to MASTER")


def _log_events(cluster: Cluster, since: dict[Path, int]) -> str:
    """The replication and failover lines each node logged since ``since`` (log sizes)."""
    lines = []
    for node in cluster.nodes:
        with contextlib.suppress(OSError), open(node.log_path, "rb") as log:
            log.seek(since.get(node.log_path, 0))
            lines += [f"  {node.port}: {line}" for line in
                      log.read().decode(errors="replace").splitlines()
                      if any(event in line for event in _EVENTS)]
    return "\n".join(lines[-60:])


def master_failover(stage: Stage, cluster: Cluster, size: int = 3000, batch: int = 1,
                    topic_slots: int = 8) -> Outcome:
    """SIGKILL one master while producers and consumer processes run; the cluster promotes
    its replica. Reports what was lost (``figures['lost']``) and where."""
    if cluster.replicas < 1:
        raise ValueError("master_failover needs a cluster with at least one replica per master")
    masters = cluster.masters()
    victim, seed = masters[0], masters[-1]
    victim_slots = _served_slots(cluster, victim.port)
    logs = {n.log_path: n.log_path.stat().st_size for n in cluster.nodes
            if n.log_path.exists()}
    detected: list[float] = []
    at_kill: dict[int, NodeReplication] = {}

    def crash() -> None:
        # Read just before the kill: was the victim still a master, and were its replicas
        # linked, in its history and how far behind (what the failover can lose)?
        at_kill.update(cluster.replication())
        victim.kill()

    def promote() -> None:
        began = time.monotonic()
        cluster.wait_ok()  # until the replica serves the victim's slots
        detected.append(time.monotonic() - began)

    def what_happened() -> str:
        promoted = None
        with contextlib.suppress(Exception):  # a report of a broken run must not break
            promoted = _server_of(cluster, min(victim_slots))
        return (f"killed {victim.port}; replication at the kill: "
                f"{describe_replication(at_kill) or 'not read (no kill yet)'}; the victim's "
                f"slots are served now by {promoted}; the nodes' logs since the start:\n"
                f"{_log_events(cluster, logs)}")

    topic = "chaos-failover"
    try:
        # Replication is asynchronous: without this wait, a master killed soon after the
        # topic was created can take the topic's registry entry with it (the promoted
        # replica answers UnknownTopic). The scenario is about losing messages.
        outcome = outages(stage, "failover", size, seed.url, seed.url, [(crash, promote)],
                          batch, tolerate_missing=True, after_create=cluster.wait_replicated)
    except Exception as exc:
        exc.add_note(what_happened())
        raise
    on_victim = {s for s in range(topic_slots) if _hash_slot(f"{{{topic}:{s}}}") in victim_slots}
    lost_elsewhere = [b for b in outcome.ledger.missing_bodies
                      if zlib.crc32(b) & (topic_slots - 1) not in on_victim]
    promoted = _server_of(cluster, min(victim_slots))
    outcome.figures.update({"failover_s": detected, "lost": outcome.ledger.missing,
                            "topic_slots_on_victim": sorted(on_victim),
                            "lost_outside_victim": len(lost_elsewhere),
                            "registry_on_victim": _hash_slot(f"{{{topic}}}") in victim_slots,
                            "replication_at_kill": describe_replication(at_kill),
                            "promoted": promoted})
    if lost_elsewhere:
        outcome.problems.append(f"lost messages of slots the killed master did not serve: "
                                f"{lost_elsewhere[:10]}")
    victim_at_kill = at_kill.get(victim.port)
    if victim_at_kill is None or victim_at_kill.role != "master":
        outcome.problems.append(f"the victim {victim.port} was no master when it was killed "
                                f"(a failover before the kill?)")
    if promoted not in {s.port for s in at_kill.values() if s.master_port == victim.port}:
        outcome.problems.append(f"the victim's slots are served by {promoted}, which was not "
                                "its replica at the kill")
    if outcome.problems:
        outcome.problems.append(what_happened())
    return outcome
