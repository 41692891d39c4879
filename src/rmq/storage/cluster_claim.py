"""A claim on a Redis Cluster, where one script call can reach only one slot.

On a single node ``claim.lua`` merges every slot's ready messages in one call. On a cluster
the slots live on several masters, so a claim runs in rounds, each one batch of calls that
the client sends as one pipeline per master, all masters at once (``client/cluster.py``):

1. **Heads**: ``head.lua`` on every slot promotes its due delayed messages and describes its
   best ready messages by priority band (priority, how many, the score of the oldest), best
   first, until they hold ``depth`` messages (an even share of the count and a margin), and
   says whether more follow; and gives its next delayed due time.
2. **Choose** (:func:`choose`, pure logic): a slot with more has nothing unread above the
   last priority it described, so every priority down to the highest such last priority
   (the floor) is known in every slot. Take those bands in priority order across the slots,
   and within one priority the slots in the order of their oldest message, each slot's
   band whole, until the count is met.
3. **Claim**: ``claim.lua`` on each chosen slot, for exactly its share and no lower than the
   lowest priority chosen there. If the floor stopped the choice short of the count, the
   same round reads those slots' heads again (after the claims, on the same connections;
   a slot whose every message described was taken is read as deep as the count still
   wanted) and the claim goes on from step 2.

A near-empty topic costs one round (the heads, nothing to claim); a claim that finds
messages costs two, and more only when one slot holds many more of the best priorities
than its share, spread over many bands. If other consumers took some of the chosen messages
first (a claim came back short), the heads are read again, a few times at most. The
guarantee is in docs/semantics.md, "Order".
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any, NamedTuple

from ..message import Message
from .calls import Call, Op, script_call
from .keys import SlotKeys
from .scripts import script

__all__ = ["Band", "SlotHead", "Share", "Choice", "head_call", "parse_head", "choose",
           "claim_across_slots"]

# Read each slot this many messages past its even share of the count, so that an uneven
# spread of the best messages over the slots still fits one read.
_MARGIN = 4
# Rounds a claim runs again when other consumers took messages it chose: after that it
# returns what it has (possibly nothing) rather than spin.
_TRIES = 3


class Band(NamedTuple):
    """A slot's ready messages of one priority: how many (``size``), and the score of the
    oldest (which orders the slots within a priority: the lower, the earlier due)."""

    priority: int
    size: int
    first: int


class SlotHead(NamedTuple):
    """What ``head.lua`` read of one slot: its best bands, best first, whether more ready
    messages follow them, and its earliest delayed due time (epoch ms)."""

    bands: tuple[Band, ...]
    more: bool
    next_due: int | None

    @property
    def described(self) -> int:
        return sum(band.size for band in self.bands)


class Share(NamedTuple):
    """What one slot's claim takes: how many (``size``), and the lowest priority among them."""

    size: int
    lowest: int


class Choice(NamedTuple):
    """The shares chosen per slot, and whether the floor stopped them short of the count
    (better messages may be unread: read the heads again)."""

    shares: dict[int, Share]
    unread: bool


@lru_cache(maxsize=4096)
def _head_keys(topic: str, group: str, slot: int) -> tuple[str, ...]:
    slot_keys = SlotKeys(topic, slot)
    keys = slot_keys.group(group)
    return (slot_keys.generation, keys.ready, keys.delayed, keys.locks, keys.running,
            keys.inflight)


def head_call(topic: str, generation: str, group: str, slot: int, now: int, depth: int,
              serial: bool, promote_limit: int, window: int, trace: str = "",
              waits: bool = False) -> Call:
    """``head.lua`` on one slot of ``group`` (its header says what each argument is);
    ``waits``: the group supersedes and the topic merges by key, so a message whose
    identity has a delivery in flight waits (``lua/includes/take.lua``) and is not
    counted."""
    keys = _head_keys(topic, group, slot)
    if trace:
        keys = (*keys, SlotKeys(topic, slot).trace_log)
    mode = 1 if serial else 2 if waits else 0
    return script_call(script("head"), keys, [now, depth, mode, promote_limit,
                                              max(window, depth), generation, trace])


def parse_head(reply: list[Any]) -> SlotHead:
    next_due, more, *fields = reply
    bands = tuple(Band(*fields[i : i + 3]) for i in range(0, len(fields), 3))
    return SlotHead(bands, bool(more), next_due if next_due >= 0 else None)


def choose(heads: Mapping[int, SlotHead], wanted: int) -> Choice:
    """Up to ``wanted`` messages that the heads prove are the best by priority: the highest
    priority first across every slot, down to the floor (module doc); within one priority
    the slot whose oldest message is the oldest first, its band whole, then the next. Each
    slot's share is a prefix of its ready messages (every band above its lowest taken
    whole), which is what ``claim.lua`` takes."""
    floor = max((head.bands[-1].priority for head in heads.values() if head.more), default=-1)
    by_priority: dict[int, list[tuple[int, int, int]]] = defaultdict(list)
    for slot, head in heads.items():
        for band in head.bands:
            if band.priority >= floor:
                by_priority[band.priority].append((band.first, slot, band.size))
    shares: dict[int, Share] = {}
    remaining = wanted
    for priority in sorted(by_priority, reverse=True):
        for _, slot, size in sorted(by_priority[priority]):
            taken = min(size, remaining)
            before = shares[slot].size if slot in shares else 0
            shares[slot] = Share(before + taken, priority)
            remaining -= taken
            if not remaining:
                return Choice(shares, False)
    return Choice(shares, floor >= 0)


def _depths_after(heads: Mapping[int, SlotHead], shares: Mapping[int, Share], remaining: int,
                  depth: int) -> dict[int, int]:
    """The slots that may still hold ready messages once their shares are claimed, and how
    deep to read each: as deep as the count still wanted where every message described
    was taken (its unread messages may all be among the best)."""
    depths = {}
    for slot, head in heads.items():
        taken = shares[slot].size if slot in shares else 0
        if head.more or taken < head.described:
            depths[slot] = max(depth, remaining) if taken == head.described else depth
    return depths


def claim_across_slots(slots: int, count: int, read_head: Callable[[int, int], Call],
                       claim_slot: Callable[[int, Share], Call],
                       claimed: Callable[[int, Any], list[Message]],
                       check: Callable[[Any], None],
                       grant: tuple[Call, Callable[[Any], int]] | None = None
                       ) -> Op[tuple[list[Message], int | None]]:
    """Claim up to ``count`` messages from a topic's ``slots`` slots (module doc); returns
    them best first, and the earliest delayed due time when fewer than ``count`` were
    claimed. ``read_head(slot, depth)`` and ``claim_slot(slot, share)`` build the calls,
    ``claimed(slot, reply)`` reads a claim's reply, ``check(reply)`` raises if a head's
    reply says the topic is gone (deleted since its registry entry was read). ``grant``:
    a call sent with the first round's heads (the group's limits: limit_reserve.lua) and
    what its reply allows the claim to take, at most ``count``."""
    depth = min(count, -(-count // slots) + _MARGIN)
    every_slot = dict.fromkeys(range(slots), depth)
    first = [] if grant is None else [grant[0]]
    replies = yield [*first, *(read_head(slot, d) for slot, d in every_slot.items())]
    if grant is not None:
        count = grant[1](replies[0])
        replies = replies[1:]
    for reply in replies:
        check(reply)
    heads = {slot: parse_head(reply) for slot, reply in zip(every_slot, replies, strict=True)}
    next_due = {slot: head.next_due for slot, head in heads.items()}
    messages: list[Message] = []
    tries = 0
    while count:  # (none granted: nothing to claim)
        wanted = count - len(messages)
        shares, unread = choose(heads, wanted)
        if not shares:
            break
        chosen = sum(share.size for share in shares.values())
        reread = _depths_after(heads, shares, wanted - chosen, depth) if unread else {}
        replies = yield ([claim_slot(slot, share) for slot, share in shares.items()]
                         + [read_head(slot, d) for slot, d in reread.items()])
        got = [m for slot, reply in zip(shares, replies, strict=False)
               for m in claimed(slot, reply)]
        messages += got
        short = len(got) < chosen  # other consumers took some of the chosen first
        tries += short
        if len(messages) == count or (not unread and not short) or tries > _TRIES:
            break
        if not reread:
            reread = every_slot
            replies = yield [read_head(slot, d) for slot, d in reread.items()]
        replies = replies[-len(reread):]
        for reply in replies:
            check(reply)
        heads = {slot: parse_head(reply) for slot, reply in zip(reread, replies, strict=True)}
        next_due.update((slot, head.next_due) for slot, head in heads.items())
    messages.sort(key=lambda m: (-m.priority, m.due_at))
    if len(messages) == count:
        return messages, None
    dues = [due for due in next_due.values() if due is not None]
    return messages, min(dues) if dues else None
