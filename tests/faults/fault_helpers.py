"""What the fault tests share besides fixtures: the run's size and the verdict."""

from __future__ import annotations

import os

from chaos.scenarios import Outcome

__all__ = ["SIZE", "kept_its_promises"]

# Messages of the large scenarios: small enough for the suite to take a couple of minutes;
# ``python -m chaos --size 100000`` is the full run.
SIZE = int(os.environ.get("RMQ_CHAOS_SIZE") or 1500)


def kept_its_promises(outcome: Outcome) -> bool:
    """Print the scenario's report (``pytest -s`` shows the figures) and judge it."""
    print(outcome.report())
    return outcome.ok
