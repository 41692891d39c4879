"""Sending: storing validated messages in every group of a topic, merged into identical
pending ones (``lua/enqueue.lua``). A batch travels as one script call per slot (at most
``MAX_SCRIPT_BATCH`` messages each), which on a single node are pipelined into one round
trip."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, NamedTuple

from .calls import Call, Op, command, script_call
from .generation import check_stored
from .keys import HeadsKeys, SlotKeys, wake_channel
from .scripts import script

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
         now: int, heads: bool) -> Op[list[bool]]:
    """Store ``batch`` in every group; returns, per message, whether it merged everywhere.
    ``heads``: the topic keeps a heads index (``heads.keeps_heads``), which each call
    updates. Raises TopicGone if the topic is not at ``generation`` any more; if so, no slot
    stored anything (each slot's call checks, and every slot shares the generation; a slot
    that stored before a delete reached it has its data removed by that delete)."""
    if len(batch) == 1:  # a single send, the hottest path: none of a batch's bookkeeping
        slot, member, priority, due = batch[0]
        (reply,) = yield [Call((generation, now, wake_channel(topic), slot if heads else "",
                                priority, due, 1, member), script("enqueue"),
                               _enqueue_keys(topic, slot, tuple(groups), heads), True)]
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


def join(batches: list[list[Call]]) -> Op[list[list[Any]]]:
    """Single sends made at once, as one round trip: each batch is the one call of a single
    send (``Call.joins``); calls into the same slot of the same topic and groups travel as
    one enqueue.lua call (at most MAX_SCRIPT_BATCH messages), their runs one after another
    and the latest ``now`` for all (every message in it is due by then). Returns, per
    batch, the replies its own call would have had (a gone topic's code to each sender)."""
    by_target: dict[tuple[Any, ...], list[int]] = defaultdict(list)
    for b, (call,) in enumerate(batches):
        generation, _, channel, heads_slot = call.args[:4]
        by_target[(call.keys, generation, channel, heads_slot)].append(b)
    joined: list[Call] = []
    senders: list[list[int]] = []
    for indexes in by_target.values():
        for start in range(0, len(indexes), MAX_SCRIPT_BATCH):
            chunk = indexes[start : start + MAX_SCRIPT_BATCH]
            calls = [batches[b][0] for b in chunk]
            first = calls[0]
            now = max(call.args[1] for call in calls)
            runs = [arg for call in calls for arg in call.args[4:]]
            joined.append(script_call(script("enqueue"), first.keys,
                                      (first.args[0], now, *first.args[2:4], *runs)))
            senders.append(chunk)
    replies = yield joined
    out: list[list[Any]] = [[] for _ in batches]
    for chunk, reply in zip(senders, replies, strict=True):
        for j, b in enumerate(chunk):
            out[b] = [reply if isinstance(reply, int) else [reply[j]]]
    return out


def wake(topic: str) -> Op[None]:
    """Wake every consumer sleeping on the topic's wake-up channel (to see a change)."""
    yield [command("PUBLISH", wake_channel(topic), "wake")]
