"""Settling deliveries: ack, fail (retry or dead-letter), release, extend a lease, and
recover expired leases. Each batch travels as one script call per slot (an ack as one per
topic's group on a single node)."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from functools import lru_cache
from typing import Any, TypeVar, cast

from ..message import Message
from ..settings import TopicSettings
from .calls import Op, script_call, together
from .codec import run_leases, to_ms
from .heads import keeps_heads
from .keys import HeadsKeys, SlotKeys, wake_channel
from .scripts import script

__all__ = ["ack", "with_acks", "fail", "release", "extend", "recover", "RECOVER_LIMIT",
           "settle_keys", "retry_args"]

T = TypeVar("T")

RECOVER_LIMIT = 1000  # deliveries a recover call returns per slot and group, in whole leases


def retry_args(settings: TopicSettings) -> list[Any]:
    """The retry policy as fail.lua and recover.lua take it: max retries, backoffs in ms."""
    return [settings.max_retries, to_ms(settings.retry_backoff),
            to_ms(settings.retry_backoff_max)]


def settle_keys(topic: str, slot: int, group: str, heads: bool) -> list[str]:
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
            *retry_args(settings), message.seq, error]
    keys = settle_keys(message.topic, message.slot, message.group, heads)
    (reply,) = yield [script_call(script("fail"), keys, args)]
    retried, dead = reply
    return "retried" if retried else "dead" if dead else None


def release(messages: Iterable[Message], now: int, heads: Collection[str]) -> Op[int]:
    """Give unstarted deliveries back without counting an attempt. ``heads``: the topics
    among theirs that keep a heads index."""
    calls = []
    for (t, g, s), ms in _by_slot(messages).items():
        indexed = t in heads
        calls.append(script_call(script("release"), settle_keys(t, s, g, indexed),
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
                script("recover"), settle_keys(topic, slot, group, heads),
                [now, wake_channel(topic), slot if heads else "", *retry_args(settings),
                 RECOVER_LIMIT]))
    results = yield calls
    return sum(r[0] for r in results), sum(r[1] for r in results)
