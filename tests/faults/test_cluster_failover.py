"""A Redis Cluster master dies and its replica takes over, while producers and consumer
processes run. Redis replicates asynchronously, so writes acknowledged by the master in its
last moments may be missing on the replica: the scenario reports how many (``lost``) and
checks that losses can only come from the killed master's slots, and that everything else
keeps the single-node promises (docs/reliability.md)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fault_helpers import SIZE, kept_its_promises

from chaos.failover import master_failover
from chaos.main import scale
from chaos.scenarios import SEND_BOUND, Stage
from rmq.server.cluster import Cluster

pytestmark = pytest.mark.faults

# How long the second test holds a replica back: longer than the scenario takes from
# creating its topic to killing the master (about 4 s for 300 messages here), shorter than
# its wait for the replicas to hold the topic (30 s).
PAUSE_MS = 10_000


@pytest.fixture
def replicated_cluster(tmp_path) -> Iterator[Cluster]:
    """3 masters with one replica each; the test kills a master, so it is not shared."""
    with Cluster(3, replicas=1, data_dir=tmp_path / "cluster") as nodes:
        yield nodes


def test_master_killed_and_replica_promoted_loses_only_unreplicated_writes(
        replicated_cluster, tmp_path, rng):
    stage = Stage(replicated_cluster.url, tmp_path / "work", rng)
    outcome = master_failover(stage, replicated_cluster, size=SIZE, batch=scale(SIZE)["batch"])
    assert kept_its_promises(outcome), outcome.report()
    figures = outcome.figures
    assert figures["lost_outside_victim"] == 0
    assert outcome.ledger.unexpected == 0
    assert figures["failover_s"][0] < 30
    assert figures["send_resumed_s"][0] is not None and figures["slowest_send_s"] <= SEND_BOUND
    assert len(replicated_cluster.masters()) == 3  # the replica took the dead master's place
    assert figures["registry_on_victim"]  # the topic itself went through the failover


def test_a_replica_behind_when_the_topic_is_created_has_it_when_its_master_dies(
        replicated_cluster, tmp_path, rng):
    """The scenario waits for the replicas to hold the topic before any fault: what it may
    lose is messages, not the topic. The killed master's replica is held back here (its
    clients' writes, and so its master's stream, paused for a few seconds) when the topic is
    created; without that wait the master died first, the promoted replica had no such
    topic and the scenario ended in UnknownTopic: the failure once seen in a full run."""
    cluster = replicated_cluster
    victim = cluster.masters()[0]  # the scenario's, which serves the topic's registry entry
    states = cluster.replication()
    replica = next(n for n in cluster.nodes if states[n.port].master_port == victim.port)
    with replica.client() as c:
        c.execute_command("CLIENT", "PAUSE", PAUSE_MS, "WRITE")
    outcome = master_failover(Stage(cluster.url, tmp_path / "work", rng), cluster, size=300)
    assert kept_its_promises(outcome), outcome.report()
    assert outcome.figures["registry_on_victim"]
    assert outcome.figures["promoted"] == replica.port
