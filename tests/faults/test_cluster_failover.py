"""A Redis Cluster master dies and its replica takes over, while producers and consumer
processes run. Redis replicates asynchronously, so writes acknowledged by the master in its
last moments may be missing on the replica: the scenario reports how many (``lost``) and
checks that losses can only come from the killed master's slots, and that everything else
keeps the single-node promises (docs/reliability.md)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from fault_helpers import SIZE, kept_its_promises

from rmq.tools.chaos.failover import master_failover
from rmq.tools.chaos.main import scale
from rmq.tools.chaos.scenarios import SEND_BOUND, Stage
from rmq.tools.servers.cluster import Cluster


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
