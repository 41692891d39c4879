"""A look at what a group could claim now, without claiming: what a batch consumer waiting
for its batch to fill reads (docs/semantics.md, "Batch handlers"). The messages stay
pending, so they keep merging while it waits.

It is ``head.lua`` on every slot, as a cluster claim's first round reads them
(``cluster_claim.py``): due delayed messages are promoted, and each slot's best ready
messages are described by priority band, until the bands hold the batch (on a serial topic
only the messages a claim could take now count). Every slot is read in one round trip (on a
cluster, one per master); the calls name every key they read, so a client that tracks the
keys it reads (``CLIENT TRACKING``) is told when any of them changes, and need read again
only the slots whose keys changed (``client/ready_watch.py``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import NamedTuple

from ..settings import TopicSettings
from .calls import Call, Op
from .claim_calls import PROMOTE_LIMIT, SERIAL_SCAN
from .cluster_claim import head_call, parse_head
from .codec import ready_due
from .generation import check_stored

__all__ = ["ReadyLook", "look_calls", "read_look", "look", "next_due_of"]


class ReadyLook(NamedTuple):
    """What a group could claim now: ``ready`` messages (counted up to the batch asked for,
    or a little beyond), whether one of them has at least the ``urgent`` priority asked for,
    since when the oldest of them has been due (epoch ms, None if none is) and when the
    next delayed message falls due (None if none is)."""

    ready: int
    urgent: bool
    since: int | None
    next_due: int | None


def look_calls(topic: str, generation: str, group: str, settings: TopicSettings, count: int,
               now: int, trace: str = "", slots: Iterable[int] | None = None) -> list[Call]:
    """One ``head.lua`` call per slot (of ``slots``, every slot of the topic when None),
    each describing at least ``count`` messages of its slot: the replies of calls made at
    different times, each still current, add up to a look as well."""
    serial = settings.serial_keys
    return [head_call(topic, generation, group, slot, now, count, serial, PROMOTE_LIMIT,
                      SERIAL_SCAN if serial else count, trace)
            for slot in (range(settings.slots) if slots is None else slots)]


def next_due_of(reply: object) -> int | None:
    """When the next delayed message of a slot falls due, from its ``look_calls`` reply
    (None: none is, or the reply says the topic is gone)."""
    if not isinstance(reply, list) or not reply or reply[0] < 0:
        return None
    due: int = reply[0]
    return due


def read_look(topic: str, replies: list[object], urgent: int) -> ReadyLook:
    """The look from ``look_calls``' replies; TopicGone when the topic was deleted (or
    deleted and created again) since its entry was read."""
    ready, is_urgent = 0, False
    since: int | None = None
    next_due: int | None = None
    for reply in replies:
        check_stored(topic, reply)
        head = parse_head(reply)  # type: ignore[arg-type]  # a head.lua reply once checked
        for band in head.bands:
            ready += band.size
            is_urgent = is_urgent or band.priority >= urgent
            due = ready_due(band.first)
            since = due if since is None else min(since, due)
        if head.next_due is not None:
            next_due = head.next_due if next_due is None else min(next_due, head.next_due)
    return ReadyLook(ready, is_urgent, since, next_due)


def look(topic: str, generation: str, group: str, settings: TopicSettings, count: int,
         now: int, urgent: int, trace: str = "") -> Op[ReadyLook]:
    """``look_calls`` in one round trip, read by ``read_look``."""
    replies = yield look_calls(topic, generation, group, settings, count, now, trace)
    return read_look(topic, replies, urgent)
