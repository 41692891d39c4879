"""Handlers that are slow but alive, and messages that always fail."""

from __future__ import annotations

import pytest
from fault_helpers import kept_its_promises

from chaos.scenarios import poison_messages, slow_handler

pytestmark = pytest.mark.faults


def test_a_live_handler_slower_than_its_lease_is_not_duplicated(stage):
    outcome = slow_handler(stage, messages=8, lease=1.0, work=3.5)
    assert kept_its_promises(outcome), outcome.report()
    assert outcome.ledger.duplicates == 0
    assert outcome.figures["retried"] == 0


def test_poison_messages_are_dead_lettered_with_their_error_after_exactly_the_attempts(stage):
    outcome = poison_messages(stage, good=100, bad=10, max_retries=3)
    assert kept_its_promises(outcome), outcome.report()
    assert (outcome.ledger.acknowledged, outcome.ledger.dead) == (100, 10)
