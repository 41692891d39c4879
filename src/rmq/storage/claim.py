"""Claiming: how a claim runs is chosen here, once, by :class:`Claimer`.

- a single node, a topic of up to ``HEADS_MIN_SLOTS`` slots: one call of ``claim.lua``
  over every slot (strict priority topic-wide in one script);
- a single node, a larger topic: ``claim_heads.lua`` over a window of the slots the
  group's heads index names (``claim_heads.py``), the window kept from claim to claim;
- a cluster, where one call reaches one slot: rounds of ``head.lua`` on every slot, then
  ``claim.lua`` on each slot chosen, bounded to its share (``cluster_claim.py``).

Priority is strict across the slots either way (docs/semantics.md, "Order").
"""

from __future__ import annotations

from typing import Any

from ..message import Message
from ..settings import TopicSettings
from .calls import Call, Op, script_call
from .claim_calls import PROMOTE_LIMIT, SERIAL_SCAN, claim_args, claim_keys, parse_claimed
from .claim_heads import Window, claim_by_heads
from .cluster_claim import Share, claim_across_slots, head_call
from .codec import to_ms
from .generation import check_stored
from .heads import keeps_heads
from .scripts import script
from .trace import trace_argument

__all__ = ["Claimer"]

Claimed = tuple[list[Message], int | None]


class Claimer:
    """A client's claims: which strategy serves a topic, and the state one keeps between
    claims (per (topic, group), the heads index's window; a stale one costs a round
    trip). ``single_node``: the client talks to one server, not a cluster."""

    def __init__(self, single_node: bool):
        self.single_node = single_node
        self._windows: dict[tuple[str, str], Window] = {}

    def claim(self, topic: str, generation: str, group: str, settings: TopicSettings,
              count: int, now: int, lease: float, holder: str = "") -> Op[Claimed]:
        """Claim up to ``count`` messages, best first; returns them and the next delayed due
        time (ms) when fewer than ``count`` were ready. Raises TopicGone if the topic is not
        at ``generation`` any more. ``holder``: who claims (a consumer's id), kept with each
        delivery for the console and ``find`` to show."""
        lease_ms = to_ms(lease)
        lease_until = now + lease_ms
        trace = trace_argument(topic, settings)
        args = claim_args(settings, generation, now, count, lease_ms, holder, trace)
        if not self.single_node:
            return (yield from _claim_on_cluster(topic, generation, group, settings, count,
                                                 now, args, lease_until))
        if not keeps_heads(settings, True):
            slots = tuple(range(settings.slots))
            (reply,) = yield [script_call(script("claim"),
                                          claim_keys(topic, group, slots, trace != ""), args)]
            check_stored(topic, reply)
            next_due: int | None = reply[0] if reply[0] >= 0 else None
            return (parse_claimed(topic, generation, group, slots, reply, lease_until, trace),
                    next_due)
        messages, next_due, window = yield from claim_by_heads(
            topic, generation, group, settings.slots, count, args, lease_until,
            self._windows.get((topic, group)))
        if window is not None:
            self._windows[(topic, group)] = window
        return messages, next_due


def _claim_on_cluster(topic: str, generation: str, group: str, settings: TopicSettings,
                      count: int, now: int, args: list[Any], lease_until: int
                      ) -> Op[Claimed]:
    """The cluster's rounds (cluster_claim.py), with claim.lua bounded to each share."""
    trace = args[8]

    def claim_slot(slot: int, share: Share) -> Call:
        bounded = args[:]
        bounded[1] = share.size
        bounded[5] = max(share.size, SERIAL_SCAN) if settings.serial_keys else share.size
        return script_call(script("claim"), claim_keys(topic, group, (slot,), trace != ""),
                           [*bounded, share.lowest])

    def read_head(slot: int, depth: int) -> Call:
        return head_call(topic, generation, group, slot, now, depth, settings.serial_keys,
                         PROMOTE_LIMIT, SERIAL_SCAN if settings.serial_keys else depth, trace)

    def claimed(slot: int, reply: Any) -> list[Message]:
        check_stored(topic, reply)
        return parse_claimed(topic, generation, group, [slot], reply, lease_until, trace)

    return (yield from claim_across_slots(settings.slots, count, read_head, claim_slot,
                                          claimed, lambda reply: check_stored(topic, reply)))
