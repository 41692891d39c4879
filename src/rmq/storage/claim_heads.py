"""A single-node claim through the group's heads index (``lua/claim_heads.lua``), for a
topic of more than ``heads.HEADS_MIN_SLOTS`` slots: each call passes a window of slots,
and claims exactly the best messages until it reaches a slot outside the window; then the
client calls again with the slots asked for (docs/storage.md, "The heads index")."""

from __future__ import annotations

from typing import Any, NamedTuple

from ..message import Message
from .calls import Call, Op, script_call
from .claim_calls import claim_keys, parse_claimed
from .generation import check_stored
from .heads import heads_keys, sync_heads_call
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
                   args: list[Any], lease_until: int, last: Window | None
                   ) -> Op[tuple[list[Message], int | None, Window | None]]:
    """Claim up to ``count`` starting from the window ``last`` left (None: the first
    slots); returns the messages, the next due time, and the window for the next claim.
    ``args``: claim_args'. Builds the index first when the script asks for it
    (sync_heads.lua: the first claim of a topic without one, then every _RESYNC_MS)."""
    slots, touched = last or ((), count)
    report = min(slots_in_topic, count, 2 * touched) + _WINDOW_MARGIN
    slots = slots or tuple(range(min(slots_in_topic, report)))
    # what a slot gave the last claim, on average (2 to 16): read that much of a slot at once
    first_read = min(16, max(2, -(-count // touched))) if touched else 2
    claimed: list[Message] = []
    next_due: int | None = None
    window = last
    trace = args[8]  # claim_args' trace argument
    sync: list[Call] = []
    for _ in range(_MAX_ROUNDS):
        call_args = args[:]
        call_args[1] = count - len(claimed)
        call_args += (_RESYNC_MS, report, _NEED_MAX, first_read, *slots)
        replies = yield [*sync, script_call(script("claim_heads"),
                                            _keys(topic, group, slots, trace != ""), call_args)]
        reply = replies[-1]
        for stored in (*replies[:-1], None if reply == _NEED_SYNC else reply):
            check_stored(topic, stored)
        if reply == _NEED_SYNC:
            # Build it, and claim in the same round trip. (Asked again right after a build:
            # the claim ran first, when the build's script had to be loaded. Once more.)
            sync = [sync_heads_call(topic, generation, group, slots_in_topic)]
            continue
        sync = []
        due, needed, head = reply[0], reply[1], reply[2]
        claimed += parse_claimed(topic, generation, group, slots, reply[2:], lease_until,
                                 trace)
        window = Window(tuple(dict.fromkeys(head)), len({m.slot for m in claimed}))
        next_due = due if due >= 0 else None
        needed = [s for s in needed if 0 <= s < slots_in_topic]
        if not needed or len(claimed) >= count:
            break
        slots = tuple(dict.fromkeys([*needed, *head]))
    return claimed, next_due, window


def _keys(topic: str, group: str, slots: tuple[int, ...], traced: bool) -> list[str]:
    # windows change from claim to claim: the keys are cached per slot, not per window
    keys = [*heads_keys(topic, group)]
    for slot in slots:
        keys += claim_keys(topic, group, (slot,), traced)[1:]
    return keys
