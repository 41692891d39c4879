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

__all__ = ["Outgoing", "MAX_SCRIPT_BATCH", "STORED", "MERGED", "OUTDATED", "send", "join",
           "wake", "enqueue_one", "outcome_one"]

MAX_SCRIPT_BATCH = 500  # messages per script call: keeps each call well under a millisecond
# What a send script answers per message: stored new in a group, merged in every group that
# accepted it, or dropped as older than its key's version (lua/includes/versions.lua).
STORED, MERGED, OUTDATED = 0, 1, 2


class Outgoing(NamedTuple):
    """A validated message: its slot, zset member, priority and due time (epoch ms; at or
    before the send's ``now`` means ready at once), and the version it was sent with (None:
    none; a topic merging by key only). A tuple: a batch builds one per message, and a
    tuple is built in a third of a frozen dataclass's time."""

    slot: int
    member: bytes
    priority: int
    due_at: int
    version: int | None = None


def send(topic: str, generation: str, groups: Sequence[str], batch: Sequence[Outgoing],
         now: int, heads: bool, filters: str = "", trace: str = "", by_key: bool = False,
         stops: str = "", version_retention: int = 0) -> Op[list[int]]:
    """Store ``batch`` in every group whose filters accept it; returns, per message, what
    became of it: STORED (new in a group), MERGED (stored nothing new: merged in every group
    that accepted it) or OUTDATED. ``filters``: the groups'
    filters (``TopicInfo.filter_argument``), one version for every call of the batch.
    ``heads``: the topic keeps a heads index (``heads.keeps_heads``), which each call
    updates. ``trace``: the topic's trace argument (``trace.trace_argument``). ``by_key``:
    the topic merges by key (``lua/includes/pending.lua``). ``stops``: the groups'
    supersede (``TopicInfo.stop_argument``). ``version_retention``: the topic's, in ms,
    for the calls carrying versions (``lua/includes/versions.lua``). Raises
    TopicGone if the topic is not at ``generation`` any more; if so, no slot stored anything
    (each slot's call checks, and every slot shares the generation; a slot that stored
    before a delete reached it has its data removed by that delete)."""
    if len(batch) == 1:  # a single send, the hottest path: none of a batch's bookkeeping
        (reply,) = yield [enqueue_one(topic, generation, groups, batch[0], now, heads,
                                      filters, trace, by_key, stops, version_retention)]
        return [outcome_one(topic, reply)]
    by_slot: dict[int, list[int]] = defaultdict(list)
    for index, message in enumerate(batch):
        by_slot[message.slot].append(index)
    calls: list[Call] = []
    order: list[list[int]] = []
    for slot, indexes in by_slot.items():
        for start in range(0, len(indexes), MAX_SCRIPT_BATCH):
            chunk = indexes[start : start + MAX_SCRIPT_BATCH]
            runs, versioned = _runs(batch, chunk)
            calls.append(_enqueue_call(
                topic, generation, groups, slot, heads, now, filters, trace,
                f"v{version_retention}" if versioned else "1" if by_key else "", stops,
                runs))
            order.append(chunk)
    results = yield calls
    for reply in results:
        check_stored(topic, reply)
    outcomes = [STORED] * len(batch)
    for chunk, codes in zip(order, results, strict=True):
        for i, code in zip(chunk, codes, strict=True):
            outcomes[i] = int(code)
    return outcomes


def enqueue_one(topic: str, generation: str, groups: Sequence[str], message: Outgoing,
                now: int, heads: bool, filters: str = "", trace: str = "",
                by_key: bool = False, stops: str = "", version_retention: int = 0) -> Call:
    """A single send's enqueue.lua call: it may travel joined with others sent at once
    (``join``, which reads its arguments back by these names), unless it carries a version;
    ``outcome_one`` reads its reply."""
    slot, member, priority, due, version = message
    if version is not None:
        return _enqueue_call(topic, generation, groups, slot, heads, now, filters, trace,
                             f"v{version_retention}", stops,
                             (priority, due, -1, version, member))
    enqueue, keys, channel = _single_target(topic, slot, tuple(groups), heads, trace != "")
    # enqueue.lua's ARGV: generation, now, channel, heads_slot, filters, trace, by_key, stops,
    # then the message as a run of one: priority, due, n, member (a plain tuple: one is built per
    # single send, a NamedTuple in 5x the time)
    return Call((generation, now, channel, slot if heads else "", filters, trace,
                 "1" if by_key else "", stops, priority, due, 1, member), enqueue, keys, True)


def outcome_one(topic: str, reply: Any) -> int:
    """What became of a single send (STORED, MERGED or OUTDATED); raises TopicGone as
    ``send`` does."""
    check_stored(topic, reply)
    return int(reply[0])


def _enqueue_call(topic: str, generation: str, groups: Sequence[str], slot: int, heads: bool,
                  now: int, filters: str, trace: str, by_key: str, stops: str,
                  runs: Sequence[Any]) -> Call:
    """One enqueue.lua call into ``slot``; ``by_key`` as enqueue.lua's ARGV[7] ("v<ms>":
    the runs may carry versions, and the slot's versions keys are passed); ``runs`` as
    ``_runs`` makes them."""
    return script_call(script("enqueue"),
                       _enqueue_keys(topic, slot, tuple(groups), heads, trace != "",
                                     by_key[:1] == "v"),
                       (generation, now, wake_channel(topic), slot if heads else "", filters,
                        trace, by_key, stops, *runs))


def _runs(batch: Sequence[tuple[object, bytes, int, int, int | None]], chunk: Iterable[int]
          ) -> tuple[list[Any], bool]:
    """enqueue.lua's arguments for ``chunk`` (indexes into ``batch``, Outgoing-shaped: its
    slot not read): runs of messages that share a priority and a due time, each ``priority,
    due, n, member...``; and whether any message carries a version (then
    ``_versioned_runs``' runs). A batch usually is one run, so a message costs one
    argument, its member."""
    args: list[Any] = []
    members: list[bytes] = []
    run_priority: int | None = None
    run_due: int | None = None
    for i in chunk:
        _, member, priority, due, version = batch[i]
        if version is not None:
            return _versioned_runs(batch, chunk), True
        if priority != run_priority or due != run_due:
            if members:
                args += (run_priority, run_due, len(members))
                args += members
                members = []
            run_priority, run_due = priority, due
        members.append(member)
    args += (run_priority, run_due, len(members))
    args += members
    return args, False


def _versioned_runs(batch: Sequence[tuple[object, bytes, int, int, int | None]],
                    chunk: Iterable[int]) -> list[Any]:
    """``_runs`` of a chunk in which messages carry versions: theirs in runs of ``priority,
    due, -n, version..., member...`` (lua/includes/versions.lua), the others' as
    ``_runs`` writes them."""
    args: list[Any] = []
    members: list[bytes] = []
    versions: list[int] = []
    run: tuple[int, int, bool] | None = None
    for i in chunk:
        _, member, priority, due, version = batch[i]
        key = (priority, due, version is not None)
        if key != run:
            if members:
                _add_run(args, run, versions, members)
                members, versions = [], []
            run = key
        members.append(member)
        if version is not None:
            versions.append(version)
    _add_run(args, run, versions, members)
    return args


def _add_run(args: list[Any], run: tuple[int, int, bool] | None, versions: list[int],
             members: list[bytes]) -> None:
    assert run is not None
    priority, due, versioned = run
    if versioned:
        args += (priority, due, -len(members))
        args += versions
    else:
        args += (priority, due, len(members))
    args += members


@lru_cache(maxsize=4096)
def _single_target(topic: str, slot: int, groups: tuple[str, ...], heads: bool, traced: bool
                   ) -> tuple[Script, tuple[str, ...], str]:
    """What every single send into ``slot`` shares: the script, its keys, the channel."""
    return (script("enqueue"), _enqueue_keys(topic, slot, groups, heads, traced),
            wake_channel(topic))


@lru_cache(maxsize=4096)
def _enqueue_keys(topic: str, slot: int, groups: tuple[str, ...],
                  heads: bool, traced: bool, versioned: bool = False) -> tuple[str, ...]:
    slot_keys = SlotKeys(topic, slot)
    keys = [slot_keys.generation, slot_keys.clock]
    for group in groups:
        keys.extend(slot_keys.group(group).all())
        if heads:
            keys += (HeadsKeys(topic, group).ready, HeadsKeys(topic, group).delayed)
    if versioned:
        keys += (slot_keys.versions, slot_keys.versions_seen)
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
    by_target: dict[tuple[tuple[str, ...], str, str, str, str], list[int]] = defaultdict(list)
    for b, (call,) in enumerate(batches):
        # enqueue_one's arguments, by name (the keys tell the topic, so its by_key too)
        generation, _, _, _, filters, trace, _, stops, _, _, _, _ = call.args
        # one version of the groups' filters (and of the trace and supersede) per call: a
        # batch is never half filtered
        by_target[(call.keys, generation, filters, trace, stops)].append(b)
    joined: list[Call] = []
    chunks: list[list[int]] = []
    for indexes in by_target.values():
        for start in range(0, len(indexes), MAX_SCRIPT_BATCH):
            chunk = indexes[start : start + MAX_SCRIPT_BATCH]
            messages: list[tuple[None, bytes, int, int, None]] = []
            latest = 0
            for b in chunk:
                # enqueue_one's arguments, by name (the same target: all but now and the
                # message are the same in each)
                (generation, now, channel, heads_slot, filters, trace, by_key, stops,
                 priority, due, _, member) = batches[b][0].args
                messages.append((None, member, priority, due, None))
                latest = now if now > latest else latest
            joined.append(script_call(script("enqueue"), batches[chunk[0]][0].keys, (
                generation, latest, channel, heads_slot, filters, trace, by_key, stops,
                *_runs(messages, range(len(messages)))[0])))
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
