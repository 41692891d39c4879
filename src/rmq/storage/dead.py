"""Dead letters, as sans-IO generators (see ``calls.py``): dead-lettering deliveries at
once, listing them, putting them back to pending, purging them."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import replace
from typing import Any

from ..errors import InvalidMessage
from ..message import DeadLetter, Message
from ..settings import TopicSettings
from .calls import Op, command, script_call
from .generation import check_stored
from .heads import keeps_heads
from .keys import SlotKeys, wake_channel
from .scripts import script
from .settle import by_key_arg, settle_keys
from .snapshot import SnapshotRow, stored_row
from .trace import purge_call, trace_argument

__all__ = ["dead_letter", "dead_letters", "dead_letter_id", "with_dead_letter_ids",
           "of_other_generation", "requeue_dead", "purge_dead"]

# fail.lua's max_retries that no delivery's attempts are within: dead at its first failure
_NO_RETRY = -1


def dead_letter(deliveries: Sequence[tuple[Message, str]], settings: TopicSettings, now: int,
                one_call: bool) -> Op[int]:
    """Dead-letter in-flight ``deliveries`` at once, each with its error, whatever their
    attempts (fail.lua with no retry left: counted as dead, traced as failed then dead);
    returns how many were still in flight. A claim does it to a message it cannot decode,
    which no retry would decode either."""
    by_slot: dict[tuple[str, str, str, int, str], list[Any]] = defaultdict(list)
    for message, error in deliveries:
        by_slot[(message.topic, message.generation, message.group, message.slot,
                 message._trace)] += (message.seq, error)
    heads = keeps_heads(settings, one_call)
    calls = [script_call(script("fail"), settle_keys(topic, slot, group, heads, trace != ""),
                         [generation, now, wake_channel(topic), slot if heads else "", trace,
                          by_key_arg(settings), _NO_RETRY, 0, 0, *pairs])
             for (topic, generation, group, slot, trace), pairs in by_slot.items()]
    results = yield calls
    return sum(reply[1] for reply in results)


def dead_letter_id(slot: int, delivery: int, generation: str) -> str:
    """A dead letter's id: its last delivery's ``slot-seq`` and the topic's generation,
    ``slot-seq-generation``. A topic deleted and created again numbers its deliveries from
    1 again, so ``slot-seq`` alone would name a dead letter of the new topic; with the
    generation, an id listed before names none (``requeue_dead`` ignores it). A topic
    created before generations existed (generation "") has ids without one."""
    return f"{slot}-{delivery}-{generation}" if generation else f"{slot}-{delivery}"


def with_dead_letter_ids(rows: list[SnapshotRow], generation: str) -> list[SnapshotRow]:
    """``rows`` (a peek's, a find's) with each dead letter's id as :func:`dead_letter_id`
    makes it, the id its ``requeue_dead`` takes."""
    out = []
    for row in rows:
        if row.state == "dead" and row.id is not None and generation:
            row = replace(row, id=f"{row.id}-{generation}")
        out.append(row)
    return out


def dead_letters(topic: str, group: str, settings: TopicSettings,
                 generation: str) -> Op[list[DeadLetter]]:
    """Every dead letter of the group, oldest death first, with ids that carry the topic's
    ``generation`` (:func:`dead_letter_id`)."""
    results = yield [command("HGETALL", SlotKeys(topic, s).group(group).dead)
                     for s in range(settings.slots)]
    by_key = settings.merge == "key"
    rows = [stored_row(topic, group, slot, "dead", delivery, 0.0, record, 0, by_key=by_key)
            for slot, records in enumerate(results) for delivery, record in records.items()]
    # a dead letter that cannot be decoded (a claim's of a message it could not decode, or a
    # damaged record) lists with what it stores as its body, marked corrupt
    letters = [DeadLetter(row.id or "", topic, group, row.body, row.key, row.priority,
                          row.attempts, row.error or "", row.due_at, row.dead_at or 0, row.tag,
                          row.properties, row.message_id, row.corrupt)
               for row in with_dead_letter_ids([r for r in rows if r is not None], generation)]
    letters.sort(key=lambda d: (d.dead_at, d.id))
    return letters


def _parse_id(dead_id: str) -> tuple[str, str, str | None]:
    """``slot``, ``seq`` and the generation (None in an id without one) of a dead-letter id,
    or InvalidMessage."""
    parts = str(dead_id).split("-")
    if (len(parts) in (2, 3) and parts[0].isdigit() and parts[1].isdigit()
            and (len(parts) == 2 or (parts[2].isalnum() and parts[2].isascii()))):
        return parts[0], parts[1], parts[2] if len(parts) == 3 else None
    raise InvalidMessage(f"not a dead-letter id of this topic: {dead_id!r}")


def of_other_generation(ids: Iterable[str], generation: str) -> bool:
    """Whether some of ``ids`` name another generation of the topic than ``generation``
    (the client's reading of it, which may be the stale one)."""
    return any(_parse_id(dead_id)[2] not in (None, generation) for dead_id in ids)


def _dead_ids_by_slot(ids: Iterable[str], slots: int, generation: str
                      ) -> dict[int, list[str]]:
    grouped: dict[int, list[str]] = defaultdict(list)
    for dead_id in ids:
        slot, delivery, of_generation = _parse_id(dead_id)
        if of_generation is not None and of_generation != generation:
            continue  # a dead letter of the topic before it was deleted: gone with it
        if int(slot) >= slots:
            raise InvalidMessage(f"not a dead-letter id of this topic: {dead_id!r}")
        grouped[int(slot)].append(delivery)
    return grouped


def requeue_dead(topic: str, generation: str, group: str, settings: TopicSettings,
                 ids: Iterable[str] | None, now: int, one_call: bool) -> Op[int]:
    """Put dead letters (``ids``, or all) back to pending, ready now with attempts reset;
    returns how many were requeued. An id that names no dead letter of the group is
    ignored (not counted): requeued or purged since, or of another ``generation`` of the
    topic (listed before it was deleted and created again). An id without a generation
    (``slot-seq``) names the dead letter of the topic as it is now. Raises TopicGone if
    the topic is not at ``generation`` any more, as ``settle.recover``."""
    targets = ({s: [] for s in range(settings.slots)} if ids is None
               else _dead_ids_by_slot(ids, settings.slots, generation))
    if not targets:
        return 0  # every id was of another generation: nothing to do
    heads = keeps_heads(settings, one_call)
    trace = trace_argument(topic, settings)
    calls = []
    for slot, deliveries in targets.items():
        calls.append(script_call(script("requeue_dead"),
                                 settle_keys(topic, slot, group, heads, trace != ""),
                                 [generation, now, wake_channel(topic), slot if heads else "",
                                  trace, by_key_arg(settings), *deliveries]))
    results = yield calls
    for reply in results:
        check_stored(topic, reply)
    return sum(reply[0] for reply in results)


def purge_dead(topic: str, group: str, settings: TopicSettings) -> Op[int]:
    """Delete every dead letter of the group; returns how many there were. A topic with the
    trace on records each one as purged (``lua/purge_dead.lua``)."""
    slots = [SlotKeys(topic, s).group(group) for s in range(settings.slots)]
    listed = yield [command("HKEYS", k.dead) for k in slots]
    trace = trace_argument(topic, settings)
    if trace:
        traced = yield [purge_call(topic, group, slot, trace, ids)
                        for slot, ids in enumerate(listed) if ids]
        return sum(traced)
    calls = []
    for k, ids in zip(slots, listed, strict=True):
        if ids:
            calls += [command("HDEL", k.dead, *ids), command("ZREM", k.dead_index, *ids)]
    results = yield calls
    return sum(results[0::2])
