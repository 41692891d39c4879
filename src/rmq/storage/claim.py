"""Claiming: how a claim runs is chosen here, once, by :class:`Claimer`.

- a single node, a topic of up to ``HEADS_MIN_SLOTS`` slots: one call of ``claim.lua``
  over every slot (strict priority topic-wide in one script);
- a single node, a larger topic: ``claim_heads.lua`` over a window of the slots the
  group's heads index names (``claim_heads.py``), the window kept from claim to claim;
- a cluster, where one call reaches one slot: rounds of ``head.lua`` on every slot, then
  ``claim.lua`` on each slot chosen, bounded to its share (``cluster_claim.py``).

A group's limits (``limits.py``) are applied by the claim script itself on a single node;
on a cluster ``limit_reserve.lua`` goes with the first round, and a limited group's claim
ends with ``limit_settle.lua``.

Priority is strict across the slots either way (docs/semantics.md, "Order").

A claimed message the client cannot decode goes to the group's dead letters before the
claim returns (``dead.dead_letter``), so it strands none of the messages claimed with it.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable
from typing import Any, NamedTuple

from ..message import Message
from ..settings import TopicSettings
from .calls import Call, Op, script_call, together
from .claim_calls import (
    PROMOTE_LIMIT,
    SERIAL_SCAN,
    ClaimArgs,
    Undecodable,
    claim_args,
    claim_keys,
    limited_claim_keys,
    parse_claimed,
)
from .claim_heads import Window, claim_by_heads
from .cluster_claim import Share, claim_across_slots, head_call
from .codec import to_ms
from .dead import dead_letter
from .generation import TopicGone, check_stored
from .heads import keeps_heads
from .limits import (
    ClaimLimit,
    Reservation,
    Verdict,
    free,
    parse_verdict,
    reserve_call,
    settle,
)
from .scripts import script
from .trace import trace_argument

__all__ = ["Claimer", "Claim"]

Claimed = tuple[list[Message], int | None]


class Claim(NamedTuple):
    """A claim's messages, the next delayed due time when fewer than asked for were ready,
    and what the claim script found of the group's limits (None: it was not asked to apply
    them, as on a cluster)."""

    messages: list[Message]
    next_due: int | None
    verdict: Verdict | None = None


class Claimer:
    """A client's claims: which strategy serves a topic, and the state one keeps between
    claims (per (topic, group), the heads index's window; a stale one costs a round
    trip). ``single_node``: the client talks to one server, not a cluster."""

    def __init__(self, single_node: bool):
        self.single_node = single_node
        self._windows: dict[tuple[str, str], Window] = {}

    def claim(self, topic: str, generation: str, group: str, settings: TopicSettings,
              count: int, now: int, lease: float, holder: str = "",
              limit: ClaimLimit | None = None, supersede: bool = False) -> Op[Claim]:
        """Claim up to ``count`` messages, best first; returns them and the next delayed due
        time (ms) when fewer than ``count`` were ready. Raises TopicGone if the topic is not
        at ``generation`` any more. ``holder``: who claims (a consumer's id), kept with each
        delivery for the console and ``find`` to show. ``limit`` (a single node only): the
        claim script applies the group's limits itself, whatever they are now, and says
        what it found (``Claim.verdict``). ``supersede``: the group supersedes (its
        deliveries are noted for a send to find: lua/includes/running.lua)."""
        lease_ms = to_ms(lease)
        lease_until = now + lease_ms
        trace = trace_argument(topic, settings)
        if not self.single_node:
            args = claim_args(settings, generation=generation, now=now, count=count,
                              lease_ms=lease_ms, holder=holder, group=group, limit=None,
                              trace=trace, supersede=supersede)
            if limit is None:
                return Claim(*(yield from _claim_on_cluster(topic, generation, group, settings,
                                                            count, now, args, lease_until)))
            return (yield from _claim_limited_on_cluster(topic, generation, group, settings,
                                                         count, now, args, lease_until, limit))
        args = claim_args(settings, generation=generation, now=now, count=count,
                          lease_ms=lease_ms, holder=holder, group=group, limit=limit,
                          trace=trace, supersede=supersede)
        undecodable: list[Undecodable] = []
        # A superseding group of a topic merging by key passes over messages that wait for
        # an older delivery of their identity (lua/includes/take.lua): it reads every slot
        # with claim.lua, which the heads index allows (its entries may only be too low).
        if not keeps_heads(settings, True) or (supersede and args.by_key):
            slots = tuple(range(settings.slots))
            keys = (claim_keys if limit is None else limited_claim_keys)(topic, group, slots,
                                                                          trace != "")
            (reply,) = yield [script_call(script("claim"), keys, args)]
            check_stored(topic, reply)
            verdict = None if limit is None else parse_verdict(reply.pop(), count)
            next_due: int | None = reply[0] if reply[0] >= 0 else None
            messages = parse_claimed(topic, generation, group, slots, reply, lease_until,
                                     trace, undecodable=undecodable, by_key=bool(args.by_key))
        else:
            messages, next_due, window, verdict = yield from claim_by_heads(
                topic, generation, group, settings.slots, count, args, lease_until,
                self._windows.get((topic, group)), limit is not None, undecodable)
            if window is not None:
                self._windows[(topic, group)] = window
        if undecodable:
            ops = [dead_letter(undecodable, settings, now, True)]
            if verdict is not None and verdict.permits:
                # the claim script wrote their permits of a max_in_flight: given back too
                ops.append(free([u.message for u in undecodable], now))
            yield from together(ops)
        return Claim(messages, next_due, verdict)


def _claim_limited_on_cluster(topic: str, generation: str, group: str,
                              settings: TopicSettings, count: int, now: int, args: ClaimArgs,
                              lease_until: int, limit: ClaimLimit) -> Op[Claim]:
    """The cluster's rounds under the group's limits, whose keys live on the topic's tag:
    ``limit_reserve.lua`` in the first round (with the heads), the claim bounded to what it
    granted, then ``limit_settle.lua`` turns the granted units into the deliveries'
    permits and gives back the rest (limits.py). A group without limits needs no settle."""
    token = secrets.token_hex(8)
    reserve = reserve_call(topic, group, count, now, lease_until - now, token, limit)
    verdicts: list[Verdict] = []

    def granted(reply: Any) -> int:
        verdicts.append(parse_verdict(reply, count))
        return verdicts[0].granted

    try:
        messages, next_due = yield from _claim_on_cluster(
            topic, generation, group, settings, count, now, args, lease_until,
            (reserve, granted))
    except TopicGone:  # refused: its units go back before the claim is retried
        if verdicts and verdicts[0].limited:
            yield from settle(topic, group, Reservation(token, verdicts[0].granted,
                                                        verdicts[0].permits), now, now, [])
        raise
    verdict = verdicts[0]
    if verdict.limited and verdict.granted and (verdict.permits
                                                or len(messages) < verdict.granted):
        yield from settle(topic, group, Reservation(token, verdict.granted, verdict.permits),
                          now, lease_until, messages)
    return Claim(messages, next_due, verdict)


def _claim_on_cluster(topic: str, generation: str, group: str, settings: TopicSettings,
                      count: int, now: int, args: ClaimArgs, lease_until: int,
                      grant: tuple[Call, Callable[[Any], int]] | None = None
                      ) -> Op[Claimed]:
    """The cluster's rounds (cluster_claim.py), with claim.lua bounded to each share; the
    messages it cannot decode dead-lettered before it returns (a limited claim's settle
    then gives their units back: they hold no permit)."""
    trace = args.trace
    undecodable: list[Undecodable] = []

    def claim_slot(slot: int, share: Share) -> Call:
        # claim.lua's own argument after the claim's: the lowest priority to claim
        return script_call(script("claim"), claim_keys(topic, group, (slot,), trace != ""),
                           (*args.bounded(share.size), share.lowest))

    def read_head(slot: int, depth: int) -> Call:
        waits = bool(args.supersede and args.by_key)
        return head_call(topic, generation, group, slot, now, depth, settings.serial_keys,
                         PROMOTE_LIMIT, SERIAL_SCAN if settings.serial_keys or waits else depth,
                         trace, waits)

    def claimed(slot: int, reply: Any) -> list[Message]:
        check_stored(topic, reply)
        return parse_claimed(topic, generation, group, [slot], reply, lease_until, trace,
                             undecodable=undecodable, by_key=bool(args.by_key))

    outcome = yield from claim_across_slots(settings.slots, count, read_head, claim_slot,
                                            claimed, lambda reply: check_stored(topic, reply),
                                            grant)
    if undecodable:
        yield from dead_letter(undecodable, settings, now, False)
    return outcome
