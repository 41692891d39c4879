"""Redis itself fails: killed and restarted, or cut off by the network."""

from __future__ import annotations

from fault_helpers import SIZE, kept_its_promises

from rmq.tools.chaos.main import scale
from rmq.tools.chaos.scenarios import SEND_BOUND, network_cuts, redis_restarts


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
