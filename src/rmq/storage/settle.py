"""Settling deliveries, as sans-IO generators (see ``calls.py``): acknowledging, failing,
giving back and extending them, and recovering those whose lease expired.

Every call passes a generation that its script checks first (``lua/includes/settle_call.lua``):
a delivery's own (the one it was claimed under, ``Message.generation``) for ``ack``,
``fail``, ``release`` and ``extend``, so that a delivery of a topic deleted since, or
deleted and created again under its name, settles nothing of the new topic whose delivery
ids start again from the same numbers; the topic's as the client read it for ``recover``,
which raises TopicGone when that read is stale (docs/storage.md, "Deleted topics").

A delivery's settles are traced when its claim was (``Message._trace``, the topic's trace
argument then): the call passes that argument and the slot's trace keys.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable, Sequence
from functools import lru_cache
from operator import itemgetter
from typing import Any, TypeVar, cast

from ..message import Message
from ..settings import TopicSettings
from ..stops import BOARD
from .calls import Op, script_call, together
from .codec import run_leases, to_ms
from .generation import check_stored
from .heads import keeps_heads
from .keys import HeadsKeys, LimitKeys, SlotKeys, wake_channel
from .scripts import script
from .trace import trace_argument

__all__ = ["ack", "with_acks", "fail", "release", "extend", "recover", "RECOVER_LIMIT",
           "ERROR_LIMIT", "bounded_error", "settle_keys", "retry_args", "by_key_arg"]

T = TypeVar("T")

_SLOT_NUMBER = itemgetter(0)  # of a (slot, deliveries) pair
RECOVER_LIMIT = 1000  # deliveries a recover call returns per slot and group, in whole leases
ERROR_LIMIT = 8192  # bytes of UTF-8 a failure's error keeps in a dead letter and the trace

# Deliveries of one call: (topic, generation, group, slot, trace argument).
_Slot = tuple[str, str, str, int, str]

_STOPPED = {2: "superseded", 3: "cancelled"}  # extend.lua's reply of a delivery told to stop


def by_key_arg(settings: TopicSettings) -> str:
    """The one-slot settling scripts' by_key argument (``lua/includes/settle_call.lua``)."""
    return "1" if settings.merge == "key" else ""


def retry_args(settings: TopicSettings) -> list[Any]:
    """The retry settings as fail.lua and recover.lua take them."""
    return [settings.max_retries, to_ms(settings.retry_backoff),
            to_ms(settings.retry_backoff_max)]


def settle_keys(topic: str, slot: int, group: str, heads: bool,
                traced: bool = False) -> list[str]:
    """KEYS of fail, release, recover and requeue_dead: the slot's generation and clock, the
    11 group keys, the group's heads index when the topic keeps one, and the slot's trace
    log when ``traced``."""
    slot_keys = SlotKeys(topic, slot)
    keys = [slot_keys.generation, slot_keys.clock, *slot_keys.group(group).all()]
    if heads:
        keys += (HeadsKeys(topic, group).ready, HeadsKeys(topic, group).delayed)
    if traced:
        keys.append(slot_keys.trace_log)
    return keys


@lru_cache(maxsize=4096)
def _group_keys(topic: str, slot: int, group: str, traced: bool) -> tuple[str, ...]:
    slot_keys = SlotKeys(topic, slot)
    keys = slot_keys.group(group).all()
    return tuple([*keys, slot_keys.trace_log] if traced else keys)


@lru_cache(maxsize=4096)
def _generation_key(topic: str, slot: int) -> str:
    return SlotKeys(topic, slot).generation


def _by_slot(messages: Iterable[Message]) -> dict[_Slot, list[Message]]:
    grouped: dict[_Slot, list[Message]] = defaultdict(list)
    for message in messages:
        grouped[(message.topic, message.generation, message.group, message.slot,
                 message._trace)].append(message)
    return grouped


def _by_group(messages: Iterable[Message], one_call: bool
              ) -> list[tuple[tuple[str, str, str, str], list[tuple[int, list[Message]]]]]:
    """Messages by (topic, generation, group, trace argument), then by slot: all of a
    group's slots together when ``one_call``, otherwise each slot on its own. Deliveries of
    two generations of a topic never share a call: each call checks one."""
    parts: dict[tuple[str, str, str, str, int | None], list[tuple[int, list[Message]]]] = (
        defaultdict(list))
    for (t, n, g, s, trace), ms_ in _by_slot(messages).items():
        parts[(t, n, g, trace, None if one_call else s)].append((s, ms_))
    return [((t, n, g, trace), slots) for (t, n, g, trace, _), slots in parts.items()]


def ack(messages: Iterable[Message], one_call: bool, now: int = 0,
        holding: Collection[tuple[str, str, str]] = ()) -> Op[int]:
    """Acknowledge deliveries; returns how many were still in flight (none of a topic
    deleted, or deleted and created again, since they were claimed). ``one_call`` (single
    node) acks every slot of a topic's group in one script call; there the deliveries of
    the (topic, generation, group)s in ``holding`` give back their permits of the group's
    max_in_flight in the same call (``lua/includes/ack_permits.lua``; at ``now``)."""
    calls = []
    for (topic, generation, group, trace), slots in _by_group(messages, one_call):
        # the lowest slot's generation: ack.lua checks that one for the call
        keys: list[str] = [_generation_key(topic, min(slots, key=_SLOT_NUMBER)[0])]
        args: list[Any] = [generation, wake_channel(topic), trace]
        for slot, ms_ in slots:
            keys += _group_keys(topic, slot, group, trace != "")
            seqs = [m.seq for m in ms_]
            whole = run_leases(seqs)
            args += (len(seqs), *seqs, len(whole), *whole)
        if one_call and (topic, generation, group) in holding:
            limit_keys = LimitKeys(topic, group)
            keys += (limit_keys.permits, limit_keys.waiters, limit_keys.wake)
            args += (now, *(slot for slot, _ in slots))
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


def bounded_error(error: str) -> str:
    """``error`` as a failure stores it: at most ERROR_LIMIT bytes of UTF-8. A longer text
    is cut on a character's boundary and ends with a marker that says so and how long it
    was, so an exception with a huge message, failing again and again, cannot fill Redis
    with copies of it in the dead letter and the trace."""
    if len(error) * 4 <= ERROR_LIMIT:  # short whatever its characters: no encoding
        return error
    data = error.encode("utf-8", "replace")
    if len(data) <= ERROR_LIMIT:
        return error
    marker = f" [... cut: {len(data)} bytes in all]"
    kept = data[:ERROR_LIMIT - len(marker)].decode("utf-8", "ignore")  # no half character
    return kept + marker


def fail(message: Message, error: str, settings: TopicSettings, now: int,
         one_call: bool) -> Op[str | None]:
    """A failed delivery: "retried", "dead", "superseded" or "cancelled" (told to stop, so
    dropped: lua/includes/running.lua), or None if its lease was already gone (or its topic
    deleted since it was claimed). The dead letter and the trace keep ``error`` bounded
    (bounded_error)."""
    heads = keeps_heads(settings, one_call)
    trace = message._trace
    args = [message.generation, now, wake_channel(message.topic),
            message.slot if heads else "", trace, by_key_arg(settings), *retry_args(settings),
            message.seq, bounded_error(error)]
    keys = settle_keys(message.topic, message.slot, message.group, heads, trace != "")
    (reply,) = yield [script_call(script("fail"), keys, args)]
    retried, dead, superseded, cancelled = reply
    return ("retried" if retried else "dead" if dead else "superseded" if superseded
            else "cancelled" if cancelled else None)


def release(messages: Iterable[Message], now: int, heads: Collection[str],
            by_key: Collection[str] = ()) -> Op[int]:
    """Give unstarted deliveries back without counting an attempt; returns how many were
    still in flight. ``heads``: the topics among theirs that keep a heads index; ``by_key``:
    those that merge by key."""
    calls = []
    for (t, n, g, s, trace), ms_ in _by_slot(messages).items():
        indexed = t in heads
        calls.append(script_call(script("release"), settle_keys(t, s, g, indexed, trace != ""),
                                 [n, now, wake_channel(t), s if indexed else "", trace,
                                  "1" if t in by_key else "", *(m.seq for m in ms_)]))
    results = yield calls
    return sum(results)


def extend(messages: Sequence[Message], until_ms: int,
           holding: Collection[tuple[str, str, str]] = ()) -> Op[list[bool]]:
    """Move the leases of ``messages`` to ``until_ms``; per message, whether it was still in
    flight. The deliveries of the (topic, generation, group)s in ``holding`` hold permits of
    their group's max_in_flight, which the same script call checks and moves with them (a
    single node): one whose permit is gone is not extended (False). A delivery the reply
    says was told to stop is confirmed on the process's stop board (rmq/stops.py): a
    consumer whose stop channel missed it learns it by its next extension."""
    grouped = _by_slot(messages)
    calls = []
    for (t, n, g, s, trace), ms_ in grouped.items():
        group_keys = SlotKeys(t, s).group(g)
        keys = [_generation_key(t, s), group_keys.inflight, group_keys.leases,
                group_keys.running]
        if trace:
            keys.append(SlotKeys(t, s).trace_log)
        permits: int | str = ""
        if (t, n, g) in holding:
            keys.append(LimitKeys(t, g).permits)
            permits = s
        calls.append(script_call(script("extend"), keys,
                                 [n, until_ms, trace, permits, *(m.seq for m in ms_)]))
    results = yield calls
    held: dict[tuple[str, str, str, int, str, int], bool] = {}
    for (where, ms_), flags in zip(grouped.items(), results, strict=True):
        for m, flag in zip(ms_, flags, strict=True):
            held[(*where, m.seq)] = bool(flag)
            if flag > 1:
                BOARD.confirmed((m.topic, m.generation, m.group, m.slot, m.seq),
                                _STOPPED[flag])
    return [held[(m.topic, m.generation, m.group, m.slot, m._trace, m.seq)] for m in messages]


def recover(topic: str, generation: str, groups: Sequence[str], settings: TopicSettings,
            now: int, one_call: bool) -> Op[tuple[int, int]]:
    """Return every expired lease of the topic to pending; returns (retried, dead). Raises
    TopicGone if the topic is not at ``generation`` any more: each slot's call checks before
    it changes anything, and a slot that ran before a delete reached it has its data removed
    by that delete."""
    heads = keeps_heads(settings, one_call)
    trace = trace_argument(topic, settings)
    calls = []
    for group in groups:
        for slot in range(settings.slots):
            calls.append(script_call(
                script("recover"), settle_keys(topic, slot, group, heads, trace != ""),
                [generation, now, wake_channel(topic), slot if heads else "", trace,
                 by_key_arg(settings), *retry_args(settings), RECOVER_LIMIT]))
    results = yield calls
    for reply in results:
        check_stored(topic, reply)
    return sum(r[0] for r in results), sum(r[1] for r in results)
