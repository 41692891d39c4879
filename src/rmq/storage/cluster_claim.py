"""A claim on a Redis Cluster, where one script call can reach only one slot.

On a single node ``claim.lua`` merges every slot's ready messages in one call. On a cluster
the slots live on several masters, so a claim runs in rounds, each one batch of calls that
the client sends as one pipeline per master, all masters at once (``client/cluster.py``):

1. **Heads**: ``head.lua`` on every slot promotes its due delayed messages and returns the
   scores of its best ready messages (``depth`` of them, best first), whether more follow,
   and its next delayed due time.
2. **Choose** (:func:`choose`, pure logic): the best scores that no unread message can beat,
   which are those at or before the least *last* score of the slots that have more; at most
   the count still wanted. That is exactly what a single node's merge would take first.
3. **Claim**: ``claim.lua`` on each chosen slot, for exactly its share and bounded to the
   worst score chosen, so it takes the messages chosen and nothing worse. When the choice
   stopped short of the count because a slot had more than was read, the same round reads
   those slots' heads again (after the claims, on the same connections) and the claim
   continues from step 2.

A near-empty topic costs one round (the heads, nothing to claim); a claim that finds
messages costs two, and more only when one read could not confirm the best ``count``
(one slot holding far more of the best messages than its share). The guarantee is in
docs/semantics.md, "Order".
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from typing import Any, NamedTuple

from ..message import Message
from .calls import Call, Op, script_call
from .keys import SlotKeys
from .scripts import script

__all__ = ["SlotHead", "Choice", "head_call", "parse_head", "choose", "claim_across_slots"]

# Read a slot this many scores past its even share of the count, so that an uneven spread
# of the best messages over the slots still fits one read.
_MARGIN = 4


class SlotHead(NamedTuple):
    """What ``head.lua`` read of one slot: its best ready scores (best first), whether more
    ready messages follow them, and its earliest delayed due time (epoch ms)."""

    scores: tuple[int, ...]
    more: bool
    next_due: int | None


class Choice(NamedTuple):
    """What to claim from each slot (slot -> how many), the worst score chosen (the claims'
    bound), and whether better messages may remain unread (another round is needed if the
    claims leave the count unfilled)."""

    counts: dict[int, int]
    bound: int | None
    unread: bool


def head_call(topic: str, group: str, slot: int, now: int, depth: int, serial: bool,
              promote_limit: int, window: int) -> Call:
    """``head.lua`` on one slot of ``group`` (header of that script)."""
    return script_call(script("head"), SlotKeys(topic, slot).group(group).all(),
                       [now, depth, int(serial), promote_limit, max(window, depth)])


def parse_head(reply: list[Any]) -> SlotHead:
    next_due, more, *scores = reply
    return SlotHead(tuple(scores), bool(more), next_due if next_due >= 0 else None)


def choose(heads: Mapping[int, SlotHead], wanted: int) -> Choice:
    """The best ``wanted`` messages that the heads prove are the best: no slot's unread
    messages can score better than its last score read, so every score up to the least such
    last score is known, and the best of those are the topic's best."""
    last_read = [head.scores[-1] for head in heads.values() if head.more and head.scores]
    known: Iterable[tuple[int, int]] = (
        (score, slot) for slot, head in heads.items() for score in head.scores)
    if last_read:
        cutoff = min(last_read)
        known = (pair for pair in known if pair[0] <= cutoff)
    chosen = heapq.nsmallest(wanted, known)
    return Choice(dict(Counter(slot for _, slot in chosen)),
                  chosen[-1][0] if chosen else None,
                  bool(last_read) and len(chosen) < wanted)


def _next_depths(heads: Mapping[int, SlotHead], choice: Choice, remaining: int,
                 depth: int) -> dict[int, int]:
    """How deep to read each slot that may still hold ready messages after the claims: a
    slot whose every score read was chosen is read as deep as the count still wanted."""
    depths = {}
    for slot, head in heads.items():
        taken = choice.counts.get(slot, 0)
        if head.more or taken < len(head.scores):
            depths[slot] = max(depth, remaining) if taken == len(head.scores) else depth
    return depths


def claim_across_slots(slots: int, count: int, read_head: Callable[[int, int], Call],
                       claim_slot: Callable[[int, int, int], Call],
                       claimed: Callable[[int, Any], list[Message]]
                       ) -> Op[tuple[list[Message], int | None]]:
    """Claim up to ``count`` messages from ``slots`` slots in rounds (module doc); returns
    them best first, and the earliest delayed due time when fewer than ``count`` were
    claimed. ``read_head(slot, depth)`` and ``claim_slot(slot, n, bound)`` build the calls,
    ``claimed(slot, reply)`` reads a claim's reply."""
    depth = min(count, -(-count // slots) + _MARGIN)
    replies = yield [read_head(slot, depth) for slot in range(slots)]
    heads = {slot: parse_head(reply) for slot, reply in enumerate(replies)}
    next_due = {slot: head.next_due for slot, head in heads.items()}
    messages: list[Message] = []
    while True:
        choice = choose(heads, count - len(messages))
        if choice.bound is None:
            break
        calls = [claim_slot(slot, n, choice.bound) for slot, n in choice.counts.items()]
        remaining = count - len(messages) - sum(choice.counts.values())
        reread = _next_depths(heads, choice, remaining, depth) if choice.unread else {}
        calls += [read_head(slot, d) for slot, d in reread.items()]
        replies = yield calls
        got = [m for slot, reply in zip(choice.counts, replies, strict=False)
               for m in claimed(slot, reply)]
        messages += got
        if not reread or not got or len(messages) == count:
            break
        heads = {slot: parse_head(reply)
                 for slot, reply in zip(reread, replies[len(choice.counts):], strict=True)}
        next_due.update((slot, head.next_due) for slot, head in heads.items())
    messages.sort(key=lambda m: (-m.priority, m.due_at))
    if len(messages) == count:
        return messages, None
    dues = [due for due in next_due.values() if due is not None]
    return messages, min(dues) if dues else None
