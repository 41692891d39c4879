"""Producers and consumer processes whose host clocks are 10 minutes behind and ahead, on
one Redis: every message is handled exactly once and on time (the clock-skew scenario)."""

from __future__ import annotations

import pytest
from fault_helpers import kept_its_promises

from chaos.scenarios import clock_skew

pytestmark = pytest.mark.faults


def test_clients_ten_minutes_apart_handle_everything_once_and_on_time(stage):
    outcome = clock_skew(stage, size=400)
    assert kept_its_promises(outcome), outcome.report()
    assert (outcome.ledger.acknowledged, outcome.ledger.duplicates) == (400, 0)
    assert outcome.figures["retried"] == outcome.figures["early"] == 0
