"""Sending: storing validated messages in every group of a topic, merged into identical
pending ones (``lua/enqueue.lua``). A batch travels as one script call per slot (at most
``MAX_SCRIPT_BATCH`` messages each), which on a single node are pipelined into one round
trip."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any, NamedTuple

from .calls import Call, Op, command, script_call
from .generation import check_stored
from .keys import HeadsKeys, SlotKeys, wake_channel
from .scripts import Script, script

__all__ = ["Outgoing", "MAX_SCRIPT_BATCH", "send", "join", "wake"]

MAX_SCRIPT_BATCH = 500  # messages per script call: keeps each call well under a millisecond


class Outgoing(NamedTuple):
    """A validated message: its slot, zset member, priority and due time (epoch ms; at or
    before the send's ``now`` means ready at once). A tuple: a batch builds one per message,
    and a tuple is built in a third of a frozen dataclass's time."""

    slot: int
    member: bytes
    priority: int
    due_at: int


def send(topic: str, generation: str, groups: Sequence[str], batch: Sequence[Outgoing],
         now: int, heads: bool, filters: str = "", trace: str = "") -> Op[list[bool]]:
    """Store ``batch`` in every group whose filters accept it; returns, per message, whether
    it stored nothing new (merged in every group that accepted it). ``filters``: the groups'
    filters (``TopicInfo.filter_argument``), one version for every call of the batch.
    ``heads``: the topic keeps a heads index (``heads.keeps_heads``), which each call
    updates. ``trace``: the topic's trace argument (``trace.trace_argument``). Raises
    TopicGone if the topic is not at ``generation`` any more; if so, no slot stored anything
    (each slot's call checks, and every slot shares the generation; a slot that stored
    before a delete reached it has its data removed by that delete)."""
    if len(batch) == 1:  # a single send, the hottest path: none of a batch's bookkeeping
        (reply,) = yield [enqueue_one(topic, generation, groups, batch[0], now, heads,
                                      filters, trace)]
        return [merged_one(topic, reply)]
    by_slot: dict[int, list[int]] = defaultdict(list)
    for index, message in enumerate(batch):
        by_slot[message.slot].append(index)
    calls: list[Call] = []
    order: list[list[int]] = []
    for slot, indexes in by_slot.items():
        for start in range(0, len(indexes), MAX_SCRIPT_BATCH):
            chunk = indexes[start : start + MAX_SCRIPT_BATCH]
            calls.append(_enqueue_call(topic, generation, groups, slot, heads, now, filters,
                                       trace, _runs(batch, chunk)))
            order.append(chunk)
    results = yield calls
    for reply in results:
        check_stored(topic, reply)
    merged = [False] * len(batch)
    for chunk, flags in zip(order, results, strict=True):
        for i, flag in zip(chunk, flags, strict=True):
            merged[i] = bool(flag)
    return merged


def enqueue_one(topic: str, generation: str, groups: Sequence[str], message: Outgoing,
                now: int, heads: bool, filters: str = "", trace: str = "") -> Call:
    """A single send's enqueue.lua call: it may travel joined with others sent at once
    (``join``); ``merged_one`` reads its reply."""
    slot, member, priority, due = message
    enqueue, keys, channel = _single_target(topic, slot, tuple(groups), heads, trace != "")
    return Call((generation, now, channel, slot if heads else "", filters, trace, priority,
                 due, 1, member), enqueue, keys, True)


def merged_one(topic: str, reply: Any) -> bool:
    """Whether a single send merged everywhere; raises TopicGone as ``send`` does."""
    check_stored(topic, reply)
    return bool(reply[0])


def _enqueue_call(topic: str, generation: str, groups: Sequence[str], slot: int, heads: bool,
                  now: int, filters: str, trace: str, runs: Sequence[Any]) -> Call:
    """One enqueue.lua call into ``slot``; ``runs`` as ``_runs`` makes them."""
    return script_call(script("enqueue"),
                       _enqueue_keys(topic, slot, tuple(groups), heads, trace != ""),
                       (generation, now, wake_channel(topic), slot if heads else "", filters,
                        trace, *runs))


def _runs(batch: Sequence[Sequence[Any]], chunk: Iterable[int],
          fields: tuple[int, int, int] = (1, 2, 3)) -> list[Any]:
    """enqueue.lua's arguments for ``chunk``: runs of messages that share a priority and a
    due time, each ``priority, due, n, member...``. A batch usually is one run, so a message
    costs one argument, its member. ``fields``: where each item of ``batch`` holds its
    member, priority and due time (an Outgoing's, by default)."""
    at_member, at_priority, at_due = fields
    args: list[Any] = []
    run_at = -1
    priority = due_at = None
    for i in chunk:
        item = batch[i]
        p, due = item[at_priority], item[at_due]
        if p != priority or due != due_at:
            if run_at >= 0:
                args[run_at + 2] = len(args) - run_at - 3
            priority, due_at, run_at = p, due, len(args)
            args += (p, due, 0)
        args.append(item[at_member])
    args[run_at + 2] = len(args) - run_at - 3
    return args


@lru_cache(maxsize=4096)
def _single_target(topic: str, slot: int, groups: tuple[str, ...], heads: bool, traced: bool
                   ) -> tuple[Script, tuple[str, ...], str]:
    """What every single send into ``slot`` shares: the script, its keys, the channel."""
    return (script("enqueue"), _enqueue_keys(topic, slot, groups, heads, traced),
            wake_channel(topic))


@lru_cache(maxsize=4096)
def _enqueue_keys(topic: str, slot: int, groups: tuple[str, ...],
                  heads: bool, traced: bool) -> tuple[str, ...]:
    slot_keys = SlotKeys(topic, slot)
    keys = [slot_keys.generation, slot_keys.clock]
    for group in groups:
        keys.extend(slot_keys.group(group).all())
        if heads:
            keys += (HeadsKeys(topic, group).ready, HeadsKeys(topic, group).delayed)
    if traced:
        keys.append(slot_keys.trace_log)
    return tuple(keys)


def join(batches: list[list[Call]]) -> Op[list[list[Any]]]:
    """Single sends made at once, as one round trip: each batch is the one call of a single
    send (``enqueue_one``); the calls into the same slot keys at the same generation travel
    as one enqueue.lua call (at most MAX_SCRIPT_BATCH messages), their messages in runs as
    ``send`` makes them and the latest ``now`` for all (every message in it is due by then).
    Returns, per batch, the replies its own call would have had (a gone topic's code to
    each sender)."""
    by_target: dict[tuple[tuple[str, ...], str, str, str], list[int]] = defaultdict(list)
    for b, (call,) in enumerate(batches):
        # one version of the groups' filters (and of the trace) per call: a batch is never
        # half filtered
        by_target[(call.keys, call.args[0], call.args[4], call.args[5])].append(b)
    joined: list[Call] = []
    chunks: list[list[int]] = []
    for indexes in by_target.values():
        for start in range(0, len(indexes), MAX_SCRIPT_BATCH):
            chunk = indexes[start : start + MAX_SCRIPT_BATCH]
            # enqueue_one's args: generation, now, channel, index slot, filters, trace,
            # priority, due, 1, member
            sent = [batches[b][0].args for b in chunk]
            runs = _runs(sent, range(len(sent)), (9, 6, 7))
            first = sent[0]
            joined.append(script_call(script("enqueue"), batches[chunk[0]][0].keys, (
                first[0], max(a[1] for a in sent), first[2], first[3], first[4], first[5],
                *runs)))
            chunks.append(chunk)
    replies = yield joined
    out: list[list[Any]] = [[]] * len(batches)
    for chunk, reply in zip(chunks, replies, strict=True):
        if isinstance(reply, int):  # the topic is gone: every sender is told
            for b in chunk:
                out[b] = [reply]
        else:
            for b, flag in zip(chunk, reply, strict=True):
                out[b] = [[flag]]
    return out


def wake(topic: str) -> Op[None]:
    """Wake every consumer sleeping on the topic's wake-up channel (to see a change)."""
    yield [command("PUBLISH", wake_channel(topic), "wake")]
