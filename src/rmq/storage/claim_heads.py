"""A single-node claim through the group's heads index (``lua/claim_heads.lua``), for a
topic of more than ``heads.HEADS_MIN_SLOTS`` slots: each call passes a window of slots,
and claims exactly the best messages until it reaches a slot outside the window; then the
client calls again with the slots asked for (docs/storage.md, "The heads index")."""

from __future__ import annotations

from typing import NamedTuple

from ..message import Message
from .calls import Call, Op, script_call
from .claim_calls import ClaimArgs, Undecodable, claim_keys, parse_claimed
from .generation import check_stored
from .heads import heads_keys, sync_heads_call
from .limits import Verdict, claim_limit_keys, parse_verdict
from .scripts import script

__all__ = ["Window", "claim_by_heads"]

_RESYNC_MS = 5000  # the index is rebuilt from every slot at most this often (Redis's clock)
_NEED_SYNC = 2  # what claim_heads.lua returns when the index must be built first
# A claim's window: the slots at the index's head, as many as the last claim took messages
# from, twice, and this many more (at most `count` and this many more): a claim of a burst
# takes runs from few slots; a claim of messages spread thin takes each from another slot.
_WINDOW_MARGIN = 8
_NEED_MAX = 256  # slots one claim_heads call asks for at most
_MAX_ROUNDS = 16  # claim_heads calls per claim at most (each one makes progress)


class Window(NamedTuple):
    """Where the last claim of a (topic, group) left the index: the slots at its head,
    which the next claim passes first, and how many slots that claim took messages from."""

    slots: tuple[int, ...]
    touched: int


def claim_by_heads(topic: str, generation: str, group: str, slots_in_topic: int, count: int,
                   args: ClaimArgs, lease_until: int, last: Window | None, limited: bool,
                   undecodable: list[Undecodable]
                   ) -> Op[tuple[list[Message], int | None, Window | None, Verdict | None]]:
    """Claim up to ``count`` starting from the window ``last`` left (None: the first
    slots); returns the messages, the next due time, the window for the next claim, and
    (``limited``: the script applies the group's limits) the last call's limit verdict.
    ``args``: the claim's (``claim_calls.claim_args``). Builds the index first when the
    script asks for it (sync_heads.lua: the first claim of a topic without one, then every
    _RESYNC_MS). Messages it cannot decode go to ``undecodable`` (parse_claimed)."""
    slots, touched = last or ((), count)
    report = min(slots_in_topic, count, 2 * touched) + _WINDOW_MARGIN
    slots = slots or tuple(range(min(slots_in_topic, report)))
    # what a slot gave the last claim, on average (2 to 16): read that much of a slot at once
    first_read = min(16, max(2, -(-count // touched))) if touched else 2
    claimed: list[Message] = []
    next_due: int | None = None
    window = last
    verdict = None
    trace = args.trace
    sync: list[Call] = []
    for _ in range(_MAX_ROUNDS):
        wanted = count - len(claimed)
        # claim_heads.lua's own arguments after the claim's (its header names each)
        call_args = (*args._replace(max_count=wanted), _RESYNC_MS, report, _NEED_MAX, first_read,
                     *slots)
        keys = _keys(topic, group, slots, limited, trace != "")
        replies = yield [*sync, script_call(script("claim_heads"), keys, call_args)]
        reply = replies[-1]
        for stored in (*replies[:-1], None if reply == _NEED_SYNC else reply):
            check_stored(topic, stored)
        if reply == _NEED_SYNC:
            # Build it, and claim in the same round trip. (Asked again right after a build:
            # the claim ran first, when the build's script had to be loaded. Once more.)
            sync = [sync_heads_call(topic, generation, group, slots_in_topic)]
            continue
        sync = []
        if limited:
            verdict = parse_verdict(reply.pop(), wanted)
        due, needed, head = reply[0], reply[1], reply[2]
        got = parse_claimed(topic, generation, group, slots, reply[2:], lease_until, trace,
                            undecodable=undecodable, by_key=bool(args.by_key))
        claimed += got
        window = Window(tuple(dict.fromkeys(head)), len({m.slot for m in claimed}))
        next_due = due if due >= 0 else None
        needed = [s for s in needed if 0 <= s < slots_in_topic]
        # (took all that the group's limits granted: they stop the claim here)
        if (not needed or len(claimed) >= count
                or (verdict is not None and len(got) >= verdict.granted)):
            break
        slots = tuple(dict.fromkeys([*needed, *head]))
    return claimed, next_due, window, verdict


def _keys(topic: str, group: str, slots: tuple[int, ...], limited: bool,
          traced: bool) -> list[str]:
    # windows change from claim to claim: the keys are cached per slot, not per window
    keys = [*heads_keys(topic, group)]
    for slot in slots:
        keys += claim_keys(topic, group, (slot,), traced)[1:]
    if limited:
        keys += claim_limit_keys(topic, group)
    return keys
