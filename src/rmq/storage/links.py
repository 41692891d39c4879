"""The span contexts of sends, kept beside their message for the consumer spans that link
to them (OpenTelemetry, ``rmq/otel.py``; docs/storage.md, "OpenTelemetry links"). Only a
client with a tracer provider configured writes or reads them.

Per group and message id, one list in the message's slot (``GroupSlotKeys.links``): a send
appends its producer span's ``traceparent`` to the list of each group it is sent to (the
latest ``MAX_LINKS`` are kept), and a claim takes the lists of the messages it claimed
(read and deleted in one round trip), so a delivery links to the sends merged into it since
the last claim. A list expires ``LINKS_TTL_MS`` after its last send.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar, cast

from ..message import Message, attach_links, message_id_of
from .calls import Call, Op, command, together
from .codec import merge_identity
from .keys import SlotKeys
from .send import Outgoing

__all__ = ["MAX_LINKS", "LINKS_TTL_MS", "store_links", "with_links", "take_links"]

T = TypeVar("T")

MAX_LINKS = 32
LINKS_TTL_MS = 86_400_000


def store_links(topic: str, groups: Sequence[str], batch: Sequence[Outgoing],
                traceparent: str | None, by_key: bool = False) -> list[Call]:
    """The commands that keep ``traceparent`` for the next claim of each message of
    ``batch`` in each group (plain commands, sent in the send's round trip); none when
    ``traceparent`` is None (no tracer provider). ``by_key``: the topic merges by key, so
    a message's id is its identity's."""
    if traceparent is None:
        return []
    calls = []
    for message in batch:
        message_id = message_id_of(topic, merge_identity(message.member) if by_key
                                   else message.member)
        for group in groups:
            key = SlotKeys(topic, message.slot).group(group).links(message_id)
            calls += [command("RPUSH", key, traceparent),
                      command("LTRIM", key, -MAX_LINKS, -1),
                      command("PEXPIRE", key, LINKS_TTL_MS)]
    return calls


def with_links(send: Op[T], topic: str, groups: Sequence[str], batch: Sequence[Outgoing],
               traceparent: str | None, by_key: bool = False) -> Op[T]:
    """``send`` of ``batch``, with ``store_links`` in its first round trip."""
    stored = store_links(topic, groups, batch, traceparent, by_key)
    if not stored:
        return (yield from send)

    def store() -> Op[None]:
        yield stored

    value, _ = yield from together([send, store()])
    return cast(T, value)


def take_links(messages: Sequence[Message]) -> Op[None]:
    """Read and delete the span contexts kept for each claimed message, and give them to
    it (``rmq.message.links_of``)."""
    keys = [SlotKeys(m.topic, m.slot).group(m.group).links(m.message_id) for m in messages]
    replies = yield [call for key in keys
                     for call in (command("LRANGE", key, 0, -1), command("UNLINK", key))]
    for message, found in zip(messages, replies[0::2], strict=True):
        if found:
            attach_links(message, tuple(text.decode() for text in found))
