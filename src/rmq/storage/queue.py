"""Sending and claiming, as sans-IO generators (see ``calls.py``); settling deliveries is
``settle.py``'s, dead letters ``dead.py``'s.

Each operation knows the topic's settings and groups already (the client's registry cache
supplies them) and touches only the keys ``keys.py`` builds. Batches travel as one script call
per slot, which on a single node are pipelined into one round trip.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import MutableMapping, Sequence
from functools import lru_cache
from typing import Any, NamedTuple

from ..message import Message, claimed_message
from ..settings import TopicSettings
from .calls import Call, Op, command, script_call
from .cluster_claim import Share, claim_across_slots, head_call
from .codec import decode_member
from .keys import HeadsKeys, SlotKeys, wake_channel
from .scripts import script

__all__ = [
    "Outgoing",
    "TopicGone",
    "MAX_SCRIPT_BATCH",
    "check_stored",
    "millis",
    "send",
    "claim",
    "wake",
    "HEADS_MIN_SLOTS",
    "keeps_heads",
    "Windows",
]

class Outgoing(NamedTuple):
    """A validated message: its slot, zset member, priority and due time (epoch ms; at or
    before the send's ``now`` means ready at once). A tuple: a batch builds one per message,
    and a tuple is built in a third of a frozen dataclass's time."""

    slot: int
    member: bytes
    priority: int
    due_at: int


class TopicGone(Exception):
    """A send or claim was refused by the scripts: the topic was deleted (``stale`` False),
    or deleted and created again (``stale`` True), since the client read its generation.
    The client reloads the topic once and either goes on or raises UnknownTopic."""

    def __init__(self, topic: str, stale: bool):
        super().__init__(f"topic {topic!r} was {'re-created' if stale else 'deleted'}")
        self.topic = topic
        self.stale = stale


# What the scripts that check the topic's generation return instead of their reply
# (includes/generation.lua).
_GONE_UNKNOWN = 0
_GONE_STALE = -1


def check_stored(topic: str, reply: Any) -> None:
    """Raises TopicGone when ``reply`` is a script's refusal (an integer, see above)."""
    if isinstance(reply, int):
        raise TopicGone(topic, stale=reply == _GONE_STALE)


# On a single node a topic of more than this many slots keeps a heads index per group
# (docs/storage.md, "The heads index"): a claim reads a window of slots instead of all.
# Smaller topics keep the one call over every slot: cheap at that size, and the index's
# extra writes would cost every send more than they save.
HEADS_MIN_SLOTS = 16
_RESYNC_MS = 5000  # the index is rebuilt from every slot at most this often (Redis's clock)
_NEED_SYNC = 2  # what claim_heads.lua returns when the index must be built first
# A claim's window: the slots at the index's head, as many as the last claim took messages
# from, twice, and this many more (at most `count` and this many more): a claim of a burst
# takes runs from few slots; a claim of messages spread thin takes each from another slot.
_WINDOW_MARGIN = 8
_NEED_MAX = 256  # slots one claim_heads call asks for at most
_MAX_ROUNDS = 16  # claim_heads calls per claim at most (each one makes progress)

# Per (topic, group): the slots at the head of the heads index after the last claim, which
# the next claim passes as its window, and how many slots that claim took messages from. A
# client keeps one; a stale one costs a round trip.
Windows = MutableMapping[tuple[str, str], tuple[tuple[int, ...], int]]


def keeps_heads(settings: TopicSettings, one_call: bool) -> bool:
    """Whether the topic's scripts keep a heads index: on a single node (``one_call``),
    for topics of more than HEADS_MIN_SLOTS slots."""
    return one_call and settings.slots > HEADS_MIN_SLOTS


MAX_SCRIPT_BATCH = 500  # messages per script call: keeps each call well under a millisecond
_PROMOTE_LIMIT = 1000
# How deep a serial topic's claim looks past messages of keys in flight, per slot: a busy
# key's backlog up to this size does not hold back the keys queued behind it.
_SERIAL_SCAN = 1000


def millis(seconds: float) -> int:
    """Seconds as whole milliseconds, as the scripts take durations."""
    return int(round(seconds * 1000))


def send(topic: str, generation: str, groups: Sequence[str], batch: Sequence[Outgoing],
         now: int, heads: bool) -> Op[list[bool]]:
    """Store ``batch`` in every group; returns, per message, whether it merged everywhere.
    ``heads``: the topic keeps a heads index (``keeps_heads``), which each call updates.
    Raises TopicGone if the topic is not at ``generation`` any more; if so, no slot stored
    anything (each slot's call checks, and every slot shares the generation; a slot that
    stored before a delete reached it has its data removed by that delete)."""
    if len(batch) == 1:  # a single send, the hottest path: none of a batch's bookkeeping
        slot, member, priority, due = batch[0]
        (reply,) = yield [_enqueue_call(topic, generation, groups, slot, heads, now,
                                        (priority, due, 1, member))]
        check_stored(topic, reply)
        return [bool(reply[0])]
    by_slot: dict[int, list[int]] = defaultdict(list)
    for index, message in enumerate(batch):
        by_slot[message.slot].append(index)
    calls: list[Call] = []
    order: list[list[int]] = []
    for slot, indexes in by_slot.items():
        for start in range(0, len(indexes), MAX_SCRIPT_BATCH):
            chunk = indexes[start : start + MAX_SCRIPT_BATCH]
            calls.append(_enqueue_call(topic, generation, groups, slot, heads, now,
                                       _runs(batch, chunk)))
            order.append(chunk)
    results = yield calls
    for reply in results:
        check_stored(topic, reply)
    merged = [False] * len(batch)
    for chunk, flags in zip(order, results, strict=True):
        for i, flag in zip(chunk, flags, strict=True):
            merged[i] = bool(flag)
    return merged


def _enqueue_call(topic: str, generation: str, groups: Sequence[str], slot: int, heads: bool,
                  now: int, runs: Sequence[Any]) -> Call:
    """One enqueue.lua call into ``slot``; ``runs`` as ``_runs`` makes them."""
    return script_call(script("enqueue"), _enqueue_keys(topic, slot, tuple(groups), heads),
                       (generation, now, wake_channel(topic), slot if heads else "", *runs))


def _runs(batch: Sequence[Outgoing], chunk: list[int]) -> list[Any]:
    """enqueue.lua's arguments for ``chunk``: runs of messages that share a priority and a
    due time, each ``priority, due, n, member...``. A batch usually is one run, so a message
    costs one argument, its member."""
    args: list[Any] = []
    run_at = -1
    priority = due_at = None
    for i in chunk:
        _, member, p, due = batch[i]
        if p != priority or due != due_at:
            if run_at >= 0:
                args[run_at + 2] = len(args) - run_at - 3
            priority, due_at, run_at = p, due, len(args)
            args += (p, due, 0)
        args.append(member)
    args[run_at + 2] = len(args) - run_at - 3
    return args


@lru_cache(maxsize=4096)
def _enqueue_keys(topic: str, slot: int, groups: tuple[str, ...],
                  heads: bool) -> tuple[str, ...]:
    slot_keys = SlotKeys(topic, slot)
    keys = [slot_keys.generation, slot_keys.clock]
    for group in groups:
        keys.extend(slot_keys.group(group).all())
        if heads:
            keys += (HeadsKeys(topic, group).ready, HeadsKeys(topic, group).delayed)
    return tuple(keys)


@lru_cache(maxsize=4096)
def _claim_keys(topic: str, group: str, slots: tuple[int, ...]) -> tuple[str, ...]:
    keys: list[str] = [SlotKeys(topic, slots[0]).generation]
    for slot in slots:
        slot_keys = SlotKeys(topic, slot)
        keys.append(slot_keys.seq)
        keys.extend(slot_keys.group(group).all())
    return tuple(keys)


def _claimed(topic: str, generation: str, group: str, slots: Sequence[int], reply: list[Any],
             lease_until: int) -> list[Message]:
    """The messages of a claim's reply (take.lua's take_chosen), after its first field, each
    carrying the generation it was claimed under (what settling it checks)."""
    shares = reply[1]
    at = 2 + 2 * shares
    seqs = dict(zip(reply[2:at:2], reply[3:at:2], strict=True))  # slot index -> next id
    out = []
    while at < len(reply):
        # a run of messages that share priority, attempts and due time
        n, priority, attempts, due = reply[at:at + 4]
        at += 4
        fields = iter(reply[at:at + 2 * n])
        at += 2 * n
        for index, member in zip(fields, fields, strict=True):
            seq = seqs[index]
            seqs[index] = seq + 1
            # most members are the bare body (codec.encode_member): no call for those
            body, key = decode_member(member) if member[:1] == b"\x00" else (member, None)
            out.append(claimed_message(topic, group, slots[index - 1], seq, body, priority,
                                       attempts, due, key, lease_until, generation))
    return out


def claim(topic: str, generation: str, group: str, settings: TopicSettings, count: int,
          now: int, lease: float, one_call: bool, holder: str = "",
          windows: Windows | None = None) -> Op[tuple[list[Message], int | None]]:
    """Claim up to ``count`` messages, best first; returns them and the next delayed due time
    (ms) when fewer than ``count`` were ready. ``one_call`` (single node) claims across all
    slots in one script, or, on a topic that keeps a heads index, across the slots the
    index names, starting from the window kept in ``windows`` (``_claim_heads``);
    otherwise (a cluster) the slots' heads are read, then the best claimed, one call per
    slot, each round one pipeline per master (``cluster_claim.py``). Priority is strict
    across the slots either way (docs/semantics.md, "Order"). Raises TopicGone if the topic
    is not at ``generation`` any more. ``holder``: who claims (a consumer's id), kept with
    each delivery for the console and ``find`` to show."""
    lease_ms = millis(lease)
    window = max(count, _SERIAL_SCAN) if settings.serial_keys else count
    base = [now, 0, lease_ms, int(settings.serial_keys), _PROMOTE_LIMIT, 0, generation, holder]
    lease_until = now + lease_ms
    if keeps_heads(settings, one_call):
        base[5] = window
        return (yield from _claim_heads(topic, generation, group, settings, count, base,
                                        lease_until, {} if windows is None else windows))
    if one_call:
        slots = list(range(settings.slots))
        args = base[:]
        args[1], args[5] = count, window
        keys = _claim_keys(topic, group, tuple(slots))
        (reply,) = yield [script_call(script("claim"), keys, args)]
        check_stored(topic, reply)
        next_due: int | None = reply[0] if reply[0] >= 0 else None
        return _claimed(topic, generation, group, slots, reply, lease_until), next_due

    def claim_slot(slot: int, share: Share) -> Call:
        args = base[:]
        args[1] = share.size
        args[5] = max(share.size, _SERIAL_SCAN) if settings.serial_keys else share.size
        return script_call(script("claim"), _claim_keys(topic, group, (slot,)),
                           [*args, share.lowest])

    def read_head(slot: int, depth: int) -> Call:
        return head_call(topic, generation, group, slot, now, depth, settings.serial_keys,
                         _PROMOTE_LIMIT, _SERIAL_SCAN if settings.serial_keys else depth)

    def claimed(slot: int, reply: Any) -> list[Message]:
        check_stored(topic, reply)
        return _claimed(topic, generation, group, [slot], reply, lease_until)

    return (yield from claim_across_slots(settings.slots, count, read_head, claim_slot,
                                          claimed, lambda reply: check_stored(topic, reply)))


def _claim_heads(topic: str, generation: str, group: str, settings: TopicSettings,
                 count: int, base: list[Any], lease_until: int,
                 windows: Windows) -> Op[tuple[list[Message], int | None]]:
    """A single-node claim through the group's heads index (claim_heads.lua): each call
    passes a window of slots, the last claim's head of the index at first, and claims
    exactly the best messages until it reaches a slot outside the window; then it calls
    again with the slots asked for. Builds the index first when the script asks for it
    (sync_heads.lua: the first claim of a topic without one, then every _RESYNC_MS)."""
    cached = (topic, group)
    slots, touched = windows.get(cached) or ((), count)
    report = min(settings.slots, count, 2 * touched) + _WINDOW_MARGIN
    slots = slots or tuple(range(min(settings.slots, report)))
    # what a slot gave the last claim, on average (2 to 16): read that much of a slot at once
    first_read = min(16, max(2, -(-count // touched))) if touched else 2
    claimed: list[Message] = []
    next_due: int | None = None
    sync: list[Call] = []
    for _ in range(_MAX_ROUNDS):
        args = base[:]
        args[1] = count - len(claimed)
        args += (_RESYNC_MS, report, _NEED_MAX, first_read, *slots)
        replies = yield [*sync, script_call(script("claim_heads"),
                                            _claim_heads_keys(topic, group, slots), args)]
        reply = replies[-1]
        for stored in (*replies[:-1], None if reply == _NEED_SYNC else reply):
            check_stored(topic, stored)
        if reply == _NEED_SYNC:
            # Build it, and claim in the same round trip. (Asked again right after a build:
            # the claim ran first, when the build's script had to be loaded. Once more.)
            sync = [_sync_heads_call(topic, generation, group, settings.slots)]
            continue
        sync = []
        due, needed, window = reply[0], reply[1], reply[2]
        claimed += _claimed(topic, generation, group, slots, reply[2:], lease_until)
        windows[cached] = (tuple(dict.fromkeys(window)), len({m.slot for m in claimed}))
        next_due = due if due >= 0 else None
        needed = [s for s in needed if 0 <= s < settings.slots]
        if not needed or len(claimed) >= count:
            break
        slots = tuple(dict.fromkeys([*needed, *window]))
    return claimed, next_due


def _sync_heads_call(topic: str, generation: str, group: str, slots: int) -> Call:
    keys = [SlotKeys(topic, 0).generation, *HeadsKeys(topic, group).all()]
    for slot in range(slots):
        group_keys = SlotKeys(topic, slot).group(group)
        keys += (group_keys.ready, group_keys.delayed)
    return script_call(script("sync_heads"), keys, [generation])


def _claim_heads_keys(topic: str, group: str, slots: tuple[int, ...]) -> list[str]:
    # windows change from claim to claim: the keys are cached per slot, not per window
    keys = [*_heads_keys(topic, group)]
    for slot in slots:
        keys += _claim_keys(topic, group, (slot,))[1:]
    return keys


@lru_cache(maxsize=1024)
def _heads_keys(topic: str, group: str) -> tuple[str, ...]:
    return (SlotKeys(topic, 0).generation, *HeadsKeys(topic, group).all())


def wake(topic: str) -> Op[None]:
    """Wake every consumer sleeping on the topic's wake-up channel (to see a change)."""
    yield [command("PUBLISH", wake_channel(topic), "wake")]
