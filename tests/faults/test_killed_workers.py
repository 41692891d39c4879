"""Consumer processes die (SIGKILL) or freeze (SIGSTOP): nothing is lost, and only what a
dead or frozen consumer held is delivered again."""

from __future__ import annotations

import pytest
from fault_helpers import SIZE, kept_its_promises

from chaos.main import scale
from chaos.scenarios import frozen_consumer, worker_kills

pytestmark = pytest.mark.faults


def test_workers_killed_at_random_points_lose_nothing_and_repeat_only_what_they_held(stage):
    knobs = scale(SIZE)
    outcome = worker_kills(stage, size=SIZE, kills=knobs["kills"], work_ms=knobs["work_ms"])
    assert kept_its_promises(outcome), outcome.report()
    ledger = outcome.ledger
    assert (ledger.sent, ledger.acknowledged, ledger.missing) == (SIZE, SIZE, 0)
    assert ledger.duplicates <= outcome.figures["duplicate_bound"]
    assert outcome.figures["redelivered"] > 0, "no kill caught a worker holding messages"


def test_a_frozen_consumer_is_redelivered_after_its_lease_and_not_before(stage):
    outcome = frozen_consumer(stage, messages=12, lease=1.5)
    assert kept_its_promises(outcome), outcome.report()
    assert outcome.figures["held_when_frozen"] > 0
    assert outcome.figures["first_redelivery_s"] <= 1.5 + 10
    assert outcome.ledger.acknowledged == 12


# Waiting 5 ms for a batch to fill; and taking what is ready under a max_batches, whose units
# a killed worker gives back with its leases.
@pytest.mark.parametrize(("batch_wait_ms", "max_batches"), [(5, None), (0, 6)])
def test_batch_workers_killed_at_random_points_lose_nothing_and_repeat_only_what_they_held(
        stage, batch_wait_ms, max_batches):
    knobs = scale(SIZE)
    outcome = worker_kills(stage, size=SIZE, kills=knobs["kills"], work_ms=knobs["work_ms"],
                           batch=8, batch_wait_ms=batch_wait_ms, max_batches=max_batches)
    assert kept_its_promises(outcome), outcome.report()
    ledger = outcome.ledger
    assert (ledger.sent, ledger.acknowledged, ledger.missing) == (SIZE, SIZE, 0)
    assert ledger.duplicates <= outcome.figures["duplicate_bound"]
    assert outcome.figures["redelivered"] > 0, "no kill caught a worker holding a batch"
