"""What producers get back and what consumers are handed."""

from __future__ import annotations

import asyncio
import hashlib
import json as _json
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, NamedTuple, overload

from .errors import InvalidArgument
from .stops import BOARD, Delivery, StopSignal

PropertyValue = str | int | float | bool

__all__ = ["Priority", "Message", "Claimed", "DeadLetter", "SendResult", "SendCounts",
           "message_id_of", "MessageIds", "links_of", "attach_links", "claimed_message",
           "UnfrozenMessage", "stop_key"]


def message_id_of(topic: str, member: bytes | str) -> str:
    """A message's id: the first 16 hex digits of the SHA-1 of ``topic:member``, where
    ``member`` is the message as stored (body, key, tag and properties: what makes two sends
    merge; docs/storage.md, "Members"): a bare body, or on a topic merging by key the key.
    A ``str`` is taken as its UTF-8 bytes, as ``send`` takes it; anything else but bytes
    raises InvalidArgument. Every send of the same content to the topic has it, across
    merges, retries and later sends; the scripts compute the same
    (``lua/includes/trace.lua``)."""
    try:
        return hashlib.sha1(topic.encode() + b":" + member).hexdigest()[:16]  # type: ignore[operator]
    except (TypeError, AttributeError, UnicodeEncodeError):  # the slow path: not bytes
        topic, member = _id_arguments(topic, member)
        return hashlib.sha1(topic.encode() + b":" + member).hexdigest()[:16]


def _id_arguments(topic: object, member: object) -> tuple[str, bytes]:
    """``message_id_of``'s arguments as it hashes them: ``member`` a str encoded as UTF-8;
    InvalidArgument naming what it cannot take."""
    if not isinstance(topic, str):
        raise InvalidArgument(f"message_id_of: topic must be a str, got {type(topic).__name__}")
    try:
        topic.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise InvalidArgument(f"message_id_of: topic is not encodable as UTF-8: {exc}") from None
    if isinstance(member, str):
        try:
            return topic, member.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidArgument(f"message_id_of: member is not encodable as UTF-8: {exc}"
                                  ) from None
    if isinstance(member, bytes | bytearray | memoryview):
        return topic, bytes(member)
    raise InvalidArgument(
        f"message_id_of: member must be bytes or str, got {type(member).__name__}")


class MessageIds(Sequence[str]):
    """The message ids of a batch, in batch order, computed when read: a ``send_many`` that
    never looks at them pays nothing for them. ``items`` hold the stored members, read with
    ``member_of``."""

    __slots__ = ("_topic", "_items", "_member_of")

    def __init__(self, topic: str, items: Sequence[Any],
                 member_of: Callable[[Any], bytes]) -> None:
        self._topic, self._items, self._member_of = topic, items, member_of

    def __len__(self) -> int:
        return len(self._items)

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[str]: ...

    def __getitem__(self, index: int | slice) -> str | Sequence[str]:
        if isinstance(index, slice):
            return [message_id_of(self._topic, self._member_of(item))
                    for item in self._items[index]]
        return message_id_of(self._topic, self._member_of(self._items[index]))

    def __iter__(self) -> Iterator[str]:
        for item in self._items:
            yield message_id_of(self._topic, self._member_of(item))

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Sequence) and list(self) == list(other)

    def __repr__(self) -> str:
        return f"MessageIds({list(self)!r})"


class Priority(IntEnum):
    """Named priority levels; any integer 0-255 is valid, higher is served first."""

    LOW = 64
    MEDIUM = 128
    HIGH = 192


@dataclass(frozen=True, slots=True)
class SendResult:
    """Where a send went: its slot, whether it merged into a pending message in every
    bound group (so nothing new was stored), and its ``message_id`` (:func:`message_id_of`:
    the same for every send of this content, what ``Client.trace`` takes). ``outdated``:
    sent with a version lower than its key's (docs/semantics.md, "Versions"), it was
    dropped for every group (``merged`` is then False)."""

    slot: int
    merged: bool
    message_id: str = field(default="", compare=False)
    outdated: bool = False


@dataclass(frozen=True, slots=True)
class SendCounts:
    """Outcome of ``send_many``: messages sent, how many of them merged everywhere, and
    each message's id in batch order (``message_ids``, computed when read); ``outdated``:
    how many were dropped as older than their key's version (docs/semantics.md,
    "Versions")."""

    sent: int
    merged: int
    message_ids: Sequence[str] = field(default=(), compare=False, repr=False)
    outdated: int = 0


@dataclass(frozen=True, slots=True)
class Message:
    """One delivery of a message to a consumer of a group.

    ``id`` names this delivery (its lease) as ``"slot-seq"``, as an in-flight snapshot
    row's id does (a dead letter's adds the topic's generation); ``seq`` is its number
    within the slot. ``attempts``
    counts deliveries so far, 1 on the first. ``key`` is the message's key (None when it has
    none; serial topics then use the body). Times are epoch milliseconds: ``due_at`` is when
    it became due, ``lease_until`` when its lease runs out unless extended.
    ``generation`` names the creation of the topic it was claimed from: settling a delivery
    of a topic deleted since (or deleted and created again under its name) changes nothing
    (docs/reliability.md, "Deleted topics").
    ``tag`` and ``properties`` are what it was sent with (None and an empty mapping when
    none).
    """

    topic: str
    group: str
    slot: int
    seq: int
    body: bytes
    priority: int
    attempts: int
    due_at: int
    key: bytes | None = None
    lease_until: int = field(default=0, compare=False)
    generation: str = ""
    tag: str | None = None
    properties: Mapping[str, PropertyValue] = field(default_factory=dict, compare=False)
    # the message as stored (docs/storage.md, "Members"), which its message_id hashes
    _member: bytes = field(default=b"", init=False, repr=False, compare=False)
    # the topic's trace as the claim passed it (storage/trace.py), which settling passes on
    _trace: str = field(default="", init=False, repr=False, compare=False)
    # the span contexts of the sends merged into it, when OpenTelemetry is on (rmq/otel.py)
    _links: tuple[str, ...] = field(default=(), init=False, repr=False, compare=False)
    # this delivery's stop state (rmq/stops.py), once asked about: it outlives the settle
    _stop: StopSignal | None = field(default=None, init=False, repr=False, compare=False)

    @property
    def message_id(self) -> str:
        """The message's id (:func:`message_id_of`), computed when read."""
        return message_id_of(self.topic, self._member or self.body)

    def _signal(self) -> StopSignal:
        signal = self._stop
        if signal is None:
            signal = BOARD.signal(stop_key(self))
            object.__setattr__(self, "_stop", signal)
        return signal

    @property
    def superseded(self) -> bool:
        """Whether Redis told this delivery to stop because a newer message of its identity
        was sent to a group bound with ``supersede`` (SPEC §14). Its handler may stop;
        however it ends, the delivery is dropped, not retried. Turns true within
        milliseconds of the send, in the process that claimed it, once Redis confirms
        the mark heard on the stop channel (rmq/stops.py), and stays so once settled."""
        return self._signal().reason == "superseded"

    @property
    def cancelled(self) -> bool:
        """Whether Redis told this delivery to stop because it was cancelled
        (``Client.cancel``); dropped however it ends, as a superseded one."""
        return self._signal().reason == "cancelled"

    @property
    def stopped(self) -> bool:
        """Whether Redis told this delivery to stop, superseded or cancelled."""
        return self._signal().reason is not None

    @property
    def stop_reason(self) -> str | None:
        """Why it was told to stop: "superseded", "cancelled", or None."""
        return self._signal().reason

    def wait_stopped(self, timeout: float | None = None) -> bool:
        """Block until Redis tells this delivery to stop (superseded or cancelled:
        :attr:`stop_reason` says which), or ``timeout`` seconds pass (None: no limit);
        returns :attr:`stopped`. A simulated or interruptible piece of work can wait here
        instead of sleeping."""
        return BOARD.wait(self._signal(), timeout) is not None

    wait_superseded = wait_stopped  # (its first name: superseded or cancelled, it stops)

    async def until_stopped(self, timeout: float | None = None) -> bool:
        """:meth:`wait_stopped` for asyncio: returns once told to stop or after
        ``timeout`` seconds, without blocking the loop."""
        loop = asyncio.get_running_loop()
        told = loop.create_future()
        stop_listening = BOARD.listen(self._signal(),
                                      lambda _: loop.call_soon_threadsafe(_resolve, told))
        try:
            await asyncio.wait_for(asyncio.shield(told), timeout)
        except TimeoutError:
            pass
        finally:
            stop_listening()
        return self.stopped

    def listen_stopped(self, listener: Callable[[str], object]) -> Callable[[], None]:
        """Call ``listener(reason)`` once when Redis tells this delivery to stop (at once
        if it did, on the stop watch's thread otherwise); returns what stops listening."""
        return BOARD.listen(self._signal(), listener)

    until_superseded = until_stopped

    @property
    def text(self) -> str:
        """The body decoded as UTF-8."""
        return self.body.decode("utf-8")

    def json(self) -> Any:
        """The body parsed as JSON."""
        return _json.loads(self.body)

    @property
    def fencing_token(self) -> int:
        """The delivery's fencing token, for a store: of two deliveries of one identity (a
        key, merging by key) in one group, the later claimed has the higher token and a
        value at least as new (docs/semantics.md, "Supersede and cancel"). It is the
        delivery's ``seq``: handed out by Redis, growing with its clock, never repeated,
        not after a failover either. A store that keeps the token it last wrote per key
        and refuses a lower one never lets an older value's handling overwrite a newer
        one's."""
        return self.seq

    @property
    def id(self) -> str:
        """``"slot-seq"``: unique within the topic's group, never reused (not after a
        failover either: docs/storage.md, "Delivery ids")."""
        return f"{self.slot}-{self.seq}"


def stop_key(message: Message) -> Delivery:
    """How the process's stop board (rmq/stops.py) names the delivery."""
    return (message.topic, message.generation, message.group, message.slot, message.seq)


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)


class UnfrozenMessage:
    """:class:`Message`'s slots without its frozen ``__setattr__``: the claims' way to make
    a Message (``claimed_message``, and storage's parse of a claim's reply, which writes it
    out in its loop) is one of these, every slot set by plain attribute stores, then made a
    Message by ``message.__class__ = Message`` (the same slots: the same layout). That costs
    a quarter of a frozen dataclass's ``__init__``, which sets each field through
    ``object.__setattr__``: what a consumer spends most of its Python on per message, after
    the round trips."""

    __slots__ = Message.__slots__


def claimed_message(topic: str, group: str, slot: int, seq: int, body: bytes, priority: int,
                    attempts: int, due_at: int, key: bytes | None, lease_until: int,
                    generation: str, tag: str | None = None,
                    properties: Mapping[str, PropertyValue] | None = None,
                    member: bytes | None = None, trace: str = "") -> Message:
    """``Message(...)`` for the claims' hot path (:class:`UnfrozenMessage`), the same
    object. The arguments are not checked: they come from Redis. ``member``: the message as
    stored, when it is not the bare body; ``trace``: the topic's trace argument when it was
    claimed, which its settles pass on."""
    message: Any = UnfrozenMessage()  # (its slots are Message's: typed there)
    message.topic = topic
    message.group = group
    message.slot = slot
    message.seq = seq
    message.body = body
    message.priority = priority
    message.attempts = attempts
    message.due_at = due_at
    message.key = key
    message.lease_until = lease_until
    message.generation = generation
    message.tag = tag
    message.properties = {} if properties is None else properties
    message._member = body if member is None else member
    message._trace = trace
    message._links = ()
    message._stop = None
    message.__class__ = Message
    return message  # type: ignore[no-any-return]


def links_of(message: Message) -> tuple[str, ...]:
    """The span contexts (W3C traceparents) of the sends merged into ``message``, as its
    claim read them (``rmq/otel.py``); empty without OpenTelemetry."""
    return message._links


def attach_links(message: Message, links: tuple[str, ...]) -> None:
    """Give a claimed ``message`` the span contexts of its sends (the claim does)."""
    object.__setattr__(message, "_links", links)


@dataclass(frozen=True, slots=True)
class DeadLetter:
    """A message whose retries are spent. ``id`` is its last delivery's id and the topic's
    generation (``"slot-seq-generation"``; ``"slot-seq"`` for a topic created before
    generations) and is what ``requeue_dead`` takes: an id listed before the topic was
    deleted and created again names no dead letter of the new one. ``error`` is the last
    failure; times are epoch milliseconds. ``tag`` and ``properties``: what it was sent
    with; ``message_id``: the message's id (:attr:`Message.message_id`). ``corrupt``: what
    is stored cannot be decoded (a :class:`~rmq.errors.CorruptMessage`): ``body`` is the
    stored bytes as they are, ``error`` says what failed (or is the claim's, for a message
    a claim could not decode), and what the damaged record held is 0 or None."""

    id: str
    topic: str
    group: str
    body: bytes
    key: bytes | None
    priority: int
    attempts: int
    error: str
    due_at: int
    dead_at: int
    tag: str | None = None
    properties: Mapping[str, PropertyValue] = field(default_factory=dict, compare=False)
    message_id: str = ""
    corrupt: bool = False

    @property
    def text(self) -> str:
        return self.body.decode("utf-8")


class Claimed(NamedTuple):
    """What ``claim_due`` returns: the messages claimed, and, when fewer than asked for were
    due, the epoch ms at which the next delayed message falls due (None if none is)."""

    messages: list[Message]
    next_due_at: int | None
