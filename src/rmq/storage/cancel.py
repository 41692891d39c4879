"""Cancelling a message by its id (SPEC §14, docs/semantics.md "Supersede and cancel"):
finding where it is pending and running in each group, then one ``lua/cancel.lua`` call per
group and slot that holds it, which removes the pending message and tells the running
deliveries to stop, wherever a claim (or a retry) moved them between the two: the call
names the message, and looks through the slot's deliveries for it when it moved. Sans-IO
operations, like ``queue.py``.

A message id is a hash of the message's identity (``message.message_id_of``), so finding it
reads every slot of the groups: SCANs of their pending zsets and in-flight records, a few
round trips per thousand messages held. Cancelling is an operator's or an application's
rare act, and nothing is stored for it on the hot paths.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import NamedTuple

from ..errors import UnknownMessage
from ..message import message_id_of
from ..settings import TopicSettings
from .calls import Op, script_call
from .codec import DECODE_ERRORS, merge_identity, parse_inflight
from .generation import check_stored
from .heads import keeps_heads
from .keys import SlotKeys, stop_channel, wake_channel
from .peek import scan_all
from .scripts import script
from .settle import by_key_arg, settle_keys
from .trace import trace_argument

__all__ = ["Cancelled", "cancel"]


class Cancelled(NamedTuple):
    """What a cancel did: pending messages removed (one per group at most), and running
    deliveries told to stop."""

    pending: int
    running: int


def cancel(topic: str, generation: str, groups: Sequence[str], settings: TopicSettings,
           message_id: str, now: int, one_call: bool) -> Op[Cancelled]:
    """Cancel the message ``message_id`` of ``topic`` in ``groups``; UnknownMessage when
    none of them holds it pending or running. Raises TopicGone as the settling scripts do."""
    by_key = settings.merge == "key"

    def named(name: bytes) -> bool:
        return message_id_of(topic, name) == message_id

    scans = {}
    for group in groups:
        for slot in range(settings.slots):
            k = SlotKeys(topic, slot).group(group)
            scans[(group, slot, "ready")] = ("ZSCAN", k.ready)
            scans[(group, slot, "delayed")] = ("ZSCAN", k.delayed)
            scans[(group, slot, "in_flight")] = ("HSCAN", k.inflight)
    scanned = yield from scan_all(scans)
    names: dict[tuple[str, int], bytes] = {}
    pending: set[tuple[str, int]] = set()
    running: dict[tuple[str, int], list[bytes]] = defaultdict(list)
    unreadable = 0
    for (group, slot, state), pairs in scanned.items():
        if state == "in_flight":
            for seq, record in pairs:
                try:
                    member = parse_inflight(record).member
                except DECODE_ERRORS:  # a damaged record: no message can be told in it
                    unreadable += 1
                    continue
                name = merge_identity(member) if by_key else member
                if named(name):
                    names[(group, slot)] = name
                    running[(group, slot)].append(seq)
        else:
            for name, _ in pairs:
                if named(name):
                    names[(group, slot)] = name
                    pending.add((group, slot))
    if not names:
        raise UnknownMessage(f"no message {message_id!r} is pending or running in "
                             f"{_groups_said(groups)} of topic {topic!r}"
                             + _unreadable_said(unreadable))
    heads = keeps_heads(settings, one_call)
    trace = trace_argument(topic, settings)
    replies = yield [script_call(
        script("cancel"), settle_keys(topic, slot, group, heads, trace != ""),
        [generation, now, wake_channel(topic), slot if heads else "", trace,
         by_key_arg(settings), stop_channel(topic), name,
         "p" if (group, slot) in pending else "", *running.get((group, slot), ())])
        for (group, slot), name in sorted(names.items())]
    for reply in replies:
        check_stored(topic, reply)
    return Cancelled(sum(int(r[0]) for r in replies), sum(int(r[1]) for r in replies))


def _unreadable_said(count: int) -> str:
    if not count:
        return ""
    return (f" ({count} stored {'entry' if count == 1 else 'entries'} could not be decoded: "
            "snapshot() shows them as rows marked corrupt)")


def _groups_said(groups: Sequence[str]) -> str:
    return f"group {groups[0]!r}" if len(groups) == 1 else "any group"
