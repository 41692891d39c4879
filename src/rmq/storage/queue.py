"""The queue's operations on stored messages, as sans-IO generators (see ``calls.py``).

Each operation knows the topic's settings and groups already (the client's registry cache
supplies them) and touches only the keys ``keys.py`` builds. Batches travel as one script call
per slot, which on a single node are pipelined into one round trip.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, MutableMapping, Sequence
from functools import lru_cache
from typing import Any, NamedTuple, TypeVar, cast

from ..errors import InvalidMessage
from ..message import DeadLetter, Message, claimed_message
from ..settings import TopicSettings
from .calls import Call, Op, command, script_call, together
from .cluster_claim import Share, claim_across_slots, head_call
from .codec import decode_member, parse_dead, run_leases
from .keys import HeadsKeys, SlotKeys, wake_channel
from .scripts import script

__all__ = [
    "Outgoing",
    "TopicGone",
    "MAX_SCRIPT_BATCH",
    "send",
    "claim",
    "ack",
    "with_acks",
    "fail",
    "release",
    "extend",
    "recover",
    "dead_letters",
    "requeue_dead",
    "purge_dead",
    "wake",
    "HEADS_MIN_SLOTS",
    "keeps_heads",
    "Windows",
]

T = TypeVar("T")


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


# What enqueue.lua and claim.lua return instead of their reply (includes/generation.lua).
_GONE_UNKNOWN = 0
_GONE_STALE = -1


def _check_stored(topic: str, reply: Any) -> None:
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
RECOVER_LIMIT = 1000  # deliveries a recover call returns per slot and group, in whole leases
# How deep a serial topic's claim looks past messages of keys in flight, per slot: a busy
# key's backlog up to this size does not hold back the keys queued behind it.
_SERIAL_SCAN = 1000


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))


def _retry_args(settings: TopicSettings) -> list[Any]:
    return [settings.max_retries, _ms(settings.retry_backoff), _ms(settings.retry_backoff_max)]


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
        _check_stored(topic, reply)
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
        _check_stored(topic, reply)
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


def _settle_keys(topic: str, slot: int, group: str, heads: bool) -> list[str]:
    """KEYS of fail, release, recover and requeue_dead: the slot clock, the 9 group keys,
    and the group's heads index when the topic keeps one."""
    slot_keys = SlotKeys(topic, slot)
    keys = [slot_keys.clock, *slot_keys.group(group).all()]
    if heads:
        keys += (HeadsKeys(topic, group).ready, HeadsKeys(topic, group).delayed)
    return keys


@lru_cache(maxsize=4096)
def _group_keys(topic: str, slot: int, group: str) -> tuple[str, ...]:
    return tuple(SlotKeys(topic, slot).group(group).all())


@lru_cache(maxsize=4096)
def _claim_keys(topic: str, group: str, slots: tuple[int, ...]) -> tuple[str, ...]:
    keys: list[str] = [SlotKeys(topic, slots[0]).generation]
    for slot in slots:
        slot_keys = SlotKeys(topic, slot)
        keys.append(slot_keys.seq)
        keys.extend(slot_keys.group(group).all())
    return tuple(keys)


def _claimed(topic: str, group: str, slots: Sequence[int], reply: list[Any],
             lease_until: int) -> list[Message]:
    """The messages of a claim's reply (take.lua's take_chosen), after its first field."""
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
                                       attempts, due, key, lease_until))
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
    lease_ms = _ms(lease)
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
        _check_stored(topic, reply)
        next_due: int | None = reply[0] if reply[0] >= 0 else None
        return _claimed(topic, group, slots, reply, lease_until), next_due

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
        _check_stored(topic, reply)
        return _claimed(topic, group, [slot], reply, lease_until)

    return (yield from claim_across_slots(settings.slots, count, read_head, claim_slot,
                                          claimed, lambda reply: _check_stored(topic, reply)))


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
            _check_stored(topic, stored)
        if reply == _NEED_SYNC:
            # Build it, and claim in the same round trip. (Asked again right after a build:
            # the claim ran first, when the build's script had to be loaded. Once more.)
            sync = [_sync_heads_call(topic, generation, group, settings.slots)]
            continue
        sync = []
        due, needed, window = reply[0], reply[1], reply[2]
        claimed += _claimed(topic, group, slots, reply[2:], lease_until)
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


def _by_slot(messages: Iterable[Message]) -> dict[tuple[str, str, int], list[Message]]:
    grouped: dict[tuple[str, str, int], list[Message]] = defaultdict(list)
    for message in messages:
        grouped[(message.topic, message.group, message.slot)].append(message)
    return grouped


def ack(messages: Iterable[Message], one_call: bool) -> Op[int]:
    """Acknowledge deliveries; returns how many were still in flight. ``one_call`` (single
    node) acks every slot of a topic's group in one script call."""
    calls = []
    for (topic, group), slots in _by_group(messages, one_call):
        keys: list[str] = []
        args: list[Any] = [wake_channel(topic)]
        for slot, ms in slots:
            keys += _group_keys(topic, slot, group)
            seqs = [m.seq for m in ms]
            whole = run_leases(seqs)
            args += (len(seqs), *seqs, len(whole), *whole)
        calls.append(script_call(script("ack"), keys, args))
    results = yield calls
    return sum(results)


def with_acks(acks: Sequence[Message], one_call: bool, op: Op[T]) -> Op[T]:
    """``op`` with ``acks`` acknowledged in its first round trip, ahead of it: a consumer
    loop acks the batch it finished in the same round trip that claims the next one."""
    if not acks:
        return (yield from op)
    _, value = yield from together([ack(acks, one_call), op])
    return cast(T, value)


def _by_group(messages: Iterable[Message], one_call: bool
              ) -> list[tuple[tuple[str, str], list[tuple[int, list[Message]]]]]:
    """Messages by (topic, group), then by slot: all of a group's slots together when
    ``one_call``, otherwise each slot on its own."""
    parts: dict[tuple[str, str, int | None], list[tuple[int, list[Message]]]] = defaultdict(list)
    for (t, g, s), ms in _by_slot(messages).items():
        parts[(t, g, None if one_call else s)].append((s, ms))
    return [((t, g), slots) for (t, g, _), slots in parts.items()]


def fail(message: Message, error: str, settings: TopicSettings, now: int,
         one_call: bool) -> Op[str | None]:
    """A failed delivery: "retried", "dead", or None if its lease was already gone."""
    heads = keeps_heads(settings, one_call)
    args = [now, wake_channel(message.topic), message.slot if heads else "",
            *_retry_args(settings), message.seq, error]
    keys = _settle_keys(message.topic, message.slot, message.group, heads)
    (reply,) = yield [script_call(script("fail"), keys, args)]
    retried, dead = reply
    return "retried" if retried else "dead" if dead else None


def release(messages: Iterable[Message], now: int, heads: Collection[str]) -> Op[int]:
    """Give unstarted deliveries back without counting an attempt. ``heads``: the topics
    among theirs that keep a heads index."""
    calls = []
    for (t, g, s), ms in _by_slot(messages).items():
        indexed = t in heads
        calls.append(script_call(script("release"), _settle_keys(t, s, g, indexed),
                                 [now, wake_channel(t), s if indexed else "",
                                  *(m.seq for m in ms)]))
    results = yield calls
    return sum(results)


def extend(messages: Sequence[Message], until_ms: int) -> Op[list[bool]]:
    """Move the leases of ``messages`` to ``until_ms``; per message, whether it was still in
    flight."""
    grouped = _by_slot(messages)
    calls = [
        script_call(script("extend"), [SlotKeys(t, s).group(g).inflight,
                                       SlotKeys(t, s).group(g).leases],
                    [until_ms, *(m.seq for m in ms)])
        for (t, g, s), ms in grouped.items()
    ]
    results = yield calls
    held: dict[tuple[str, str, int, int], bool] = {}
    for ((t, g, s), ms), flags in zip(grouped.items(), results, strict=True):
        for m, flag in zip(ms, flags, strict=True):
            held[(t, g, s, m.seq)] = bool(flag)
    return [held[(m.topic, m.group, m.slot, m.seq)] for m in messages]


def recover(topic: str, groups: Sequence[str], settings: TopicSettings,
            now: int, one_call: bool) -> Op[tuple[int, int]]:
    """Return every expired lease of the topic to pending; returns (retried, dead)."""
    heads = keeps_heads(settings, one_call)
    calls = []
    for group in groups:
        for slot in range(settings.slots):
            calls.append(script_call(
                script("recover"), _settle_keys(topic, slot, group, heads),
                [now, wake_channel(topic), slot if heads else "", *_retry_args(settings),
                 RECOVER_LIMIT]))
    results = yield calls
    return sum(r[0] for r in results), sum(r[1] for r in results)


def dead_letters(topic: str, group: str, settings: TopicSettings) -> Op[list[DeadLetter]]:
    """Every dead letter of the group, oldest death first."""
    results = yield [command("HGETALL", SlotKeys(topic, s).group(group).dead)
                     for s in range(settings.slots)]
    letters = []
    for slot, records in enumerate(results):
        for delivery, record in records.items():
            dead = parse_dead(record)
            body, key = decode_member(dead.member)
            letters.append(DeadLetter(f"{slot}-{int(delivery)}", topic, group, body, key,
                                      dead.priority, dead.attempts, dead.error, dead.due_at,
                                      dead.dead_at))
    letters.sort(key=lambda d: (d.dead_at, d.id))
    return letters


def _dead_ids_by_slot(ids: Iterable[str], slots: int) -> dict[int, list[str]]:
    grouped: dict[int, list[str]] = defaultdict(list)
    for dead_id in ids:
        slot, _, delivery = str(dead_id).partition("-")
        if not (slot.isdigit() and delivery.isdigit() and int(slot) < slots):
            raise InvalidMessage(f"not a dead-letter id of this topic: {dead_id!r}")
        grouped[int(slot)].append(delivery)
    return grouped


def requeue_dead(topic: str, group: str, settings: TopicSettings, ids: Iterable[str] | None,
                 now: int, one_call: bool) -> Op[int]:
    """Put dead letters (``ids``, or all) back to pending, ready now with attempts reset."""
    targets = ({s: [] for s in range(settings.slots)} if ids is None
               else _dead_ids_by_slot(ids, settings.slots))
    heads = keeps_heads(settings, one_call)
    calls = []
    for slot, deliveries in targets.items():
        calls.append(script_call(script("requeue_dead"), _settle_keys(topic, slot, group, heads),
                                 [now, wake_channel(topic), slot if heads else "",
                                  *deliveries]))
    results = yield calls
    return sum(results)


def purge_dead(topic: str, group: str, settings: TopicSettings) -> Op[int]:
    """Delete every dead letter of the group; returns how many there were."""
    slots = [SlotKeys(topic, s).group(group) for s in range(settings.slots)]
    listed = yield [command("HKEYS", k.dead) for k in slots]
    calls = []
    for k, ids in zip(slots, listed, strict=True):
        if ids:
            calls += [command("HDEL", k.dead, *ids), command("ZREM", k.dead_index, *ids)]
    results = yield calls
    return sum(results[0::2])


def wake(topic: str) -> Op[None]:
    """Wake every consumer sleeping on the topic's wake-up channel (to see a change)."""
    yield [command("PUBLISH", wake_channel(topic), "wake")]
