"""The ledger that ends every fault scenario: where did each message sent end up?

Every body a producer sent (and was told was stored) must be found in exactly one place:
handled and acknowledged (the handler recorded it and Redis no longer holds it), pending
(ready or delayed), in flight, or dead. Anything else is *missing*, which is the one thing a
scenario must never report. Sends that raised (Redis was unreachable) are *uncertain*: the
producer was told, and they may or may not have been stored; they are counted, not required.
Redis's side is read through the public API only (``snapshot`` and ``stats``).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from typing import Any

from rmq.client import Client

from .fleet import Handled

__all__ = ["Ledger", "account"]

_PENDING = ("ready", "delayed")


@dataclass(frozen=True)
class Ledger:
    """``sent == acknowledged + pending + in_flight + dead + missing`` by construction;
    ``missing`` and ``unexpected`` list bodies (at most 20) and must be empty."""

    sent: int
    acknowledged: int
    pending: int
    in_flight: int
    dead: int
    missing: int
    uncertain: int = 0
    uncertain_stored: int = 0
    unexpected: int = 0
    handlings: int = 0
    duplicates: int = 0
    stats_agree: bool = True
    examples: dict[str, list[str]] = field(default_factory=dict)
    missing_bodies: tuple[bytes, ...] = field(default=(), repr=False)

    @property
    def balanced(self) -> bool:
        return self.missing == 0 and self.unexpected == 0 and self.stats_agree

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def line(self) -> str:
        """One line for a report."""
        return (f"sent {self.sent} = acknowledged {self.acknowledged} + pending {self.pending}"
                f" + in flight {self.in_flight} + dead {self.dead} + missing {self.missing};"
                f" duplicates {self.duplicates}, uncertain sends {self.uncertain}"
                f" ({self.uncertain_stored} stored), unexpected {self.unexpected}")


def account(client: Client, topic: str, sent: Iterable[bytes], handled: Handled, *,
            group: str = "default", uncertain: Iterable[bytes] = ()) -> Ledger:
    """Reconcile ``sent`` against what the handlers recorded and what Redis holds now."""
    sent, uncertain = set(sent), set(uncertain) - set(sent)
    state: dict[bytes, str] = {}
    counts = dict.fromkeys(("pending", "in_flight", "dead"), 0)
    for row in client.snapshot(topic, groups=[group]):
        where = "pending" if row.state in _PENDING else row.state
        counts[where] += 1
        # A body stored twice (a retried send after its first copy was claimed) is reported
        # by its least finished state.
        if state.get(row.body) != "in_flight":
            state[row.body] = where
    totals = client.stats(topic).groups.get(group)
    stats_agree = totals is not None and (totals.pending, totals.in_flight, totals.dead) == (
        counts["pending"], counts["in_flight"], counts["dead"])
    by_state = {name: {b for b in sent if state.get(b) == name} for name in counts}
    acknowledged = {b for b in sent if b not in state and handled.ok[b]}
    missing = sent - acknowledged - set(state)
    seen = set(state) | set(handled.ok) | set(handled.failed)
    unexpected = seen - sent - uncertain
    return Ledger(
        sent=len(sent), acknowledged=len(acknowledged), pending=len(by_state["pending"]),
        in_flight=len(by_state["in_flight"]), dead=len(by_state["dead"]), missing=len(missing),
        uncertain=len(uncertain), uncertain_stored=len(uncertain & seen),
        unexpected=len(unexpected), handlings=handled.handlings,
        duplicates=handled.duplicates, stats_agree=stats_agree,
        examples={"missing": sorted(b.decode(errors="replace") for b in missing)[:20],
                  "unexpected": sorted(b.decode(errors="replace") for b in unexpected)[:20]},
        missing_bodies=tuple(sorted(missing)))
