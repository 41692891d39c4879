"""Fault injection for RMQ, run from the checkout (``python -m chaos``, ``./dev chaos``) and
by ``tests/faults``; not part of the installed package.

- :mod:`.proxy`: a loopback TCP proxy that cuts the network (reset or stall);
- :mod:`.worker`: a consumer process that records what it handled;
- :mod:`.fleet`: starting, killing and freezing those processes, and reading their records;
- :mod:`.producer`: a producer thread that remembers what it was told;
- :mod:`.ledger`: reconciling what was sent with what was handled and what Redis holds;
- :mod:`.scenarios`: the scenarios, each ending with a ledger.
- :mod:`.main`: ``python -m chaos``, running the scenarios and printing their ledgers.
"""

from .main import main

__all__ = ["main"]
