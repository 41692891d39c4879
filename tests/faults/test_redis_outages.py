"""Redis itself fails: killed and restarted, or cut off by the network."""

from __future__ import annotations

import pytest
from fault_helpers import SIZE, kept_its_promises

import rmq
from chaos.main import scale
from chaos.scenarios import SEND_BOUND, network_cuts, outages, redis_restarts
from rmq.server import wait_until

pytestmark = pytest.mark.faults


def test_redis_killed_and_restarted_under_appendfsync_always_loses_no_acknowledged_work(
        own_stage):
    stage = own_stage(appendfsync="always")
    outcome = redis_restarts(stage, size=SIZE, restarts=2, down=1.0,
                             batch=scale(SIZE)["batch"])
    assert kept_its_promises(outcome), outcome.report()
    assert outcome.figures["appendfsync"] == "always"
    assert outcome.ledger.missing == 0 and outcome.ledger.unexpected == 0
    assert outcome.ledger.sent + outcome.ledger.uncertain == SIZE
    assert outcome.figures["slowest_send_s"] <= SEND_BOUND


def test_network_cut_by_a_proxy_loses_nothing_and_clients_reconnect_by_themselves(own_stage):
    stage = own_stage()
    outcome = network_cuts(stage, size=SIZE, outage=1.5, batch=scale(SIZE)["batch"])
    assert kept_its_promises(outcome), outcome.report()
    assert outcome.ledger.missing == 0 and outcome.ledger.unexpected == 0
    assert outcome.figures["proxy_connections"] > 4  # the clients did reconnect


def test_a_fault_repaired_after_everything_was_consumed_leaves_nothing_to_resume(own_stage):
    """Consuming has resumed after a repair when an acknowledgement follows it, or when every
    message was acknowledged by then: the failover scenario once failed "did not resume"
    with 300 messages all consumed during its 3.5 s failover."""
    stage = own_stage()
    url = stage.server.url
    size = 50
    with rmq.Client(url) as client:
        def all_acknowledged() -> None:
            wait_until(lambda: client.stats("chaos-drained").groups["default"]
                       .counters["acked"] >= size, 60, "every message acknowledged")

        outcome = outages(stage, "drained", size, url, url, [(lambda: None, all_acknowledged)],
                          batch=1)
    assert kept_its_promises(outcome), outcome.report()
    assert outcome.figures["consume_resumed_s"][0] is not None
