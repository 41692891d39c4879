"""The console's view of a topic's transactions (docs/transactions.md): the open ones with
their age, half messages and checks so far, and the topic's counts (half messages held,
abandoned transactions). Drawn on the topic page and served at
``/api/topics/{topic}/transactions``."""

from __future__ import annotations

from typing import Any

import rmq

__all__ = ["transactions_view"]

SHOWN = 200  # open transactions listed at most (the oldest first); the count is exact


def transactions_view(client: rmq.Client, name: str) -> dict[str, Any]:
    """The topic's open transactions, oldest first, and its transaction counts."""
    found = client.open_transactions(name)
    figures = client.stats(name).transactions
    now = client.now()
    return {
        "open_count": len(found), "halves": figures.halves, "abandoned": figures.abandoned,
        "committed": figures.committed, "rolled_back": figures.rolled_back,
        "slots": [{"slot": s.slot, "open": s.open, "halves": s.halves}
                  for s in figures.slots if s.open or s.halves],
        "open": [{**tx.to_dict(), "age_ms": tx.age_ms(now),
                  "check_in_ms": max(0, tx.check_due_at - now)} for tx in found[:SHOWN]],
    }
