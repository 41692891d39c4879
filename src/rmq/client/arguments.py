"""Checks of the public methods' arguments, written once for both clients.

Every flow of ``base.py`` checks its arguments here before it yields anything, so a bad
argument raises a typed :class:`~rmq.errors.InputError` naming it and nothing is written.
(Sends are checked by ``outgoing.py``, topic settings by ``rmq.settings``.)
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from ..errors import InvalidArgument
from ..message import Message
from ..settings import MAX_LEASE, check_group_name, check_int, check_number, check_topic_name
from ..storage.registry import MAX_SLOTS, ConsumerState

__all__ = ["check_count", "check_lease", "check_wait", "check_messages", "check_message",
           "check_error", "check_ids", "check_flag", "check_state", "check_consumer_id",
           "check_names", "check_slots", "MAX_WAIT"]

MAX_COUNT = 10_000
MAX_WAIT = 86_400.0  # a day: longer waits are loops of shorter ones
MIN_LEASE = 0.01
_NOTHING_CHECKED = object()  # no message's topic or group is this


def check_count(count: object) -> int:
    return check_int("count", count, 1, MAX_COUNT, InvalidArgument)


def check_lease(seconds: object, name: str = "lease") -> float:
    """A lease or extension in seconds: finite, from 10 ms to 7 days (a lease that never
    runs out would keep a message in flight forever)."""
    return check_number(name, seconds, MIN_LEASE, MAX_LEASE, InvalidArgument)


def check_wait(seconds: object, name: str = "wait") -> float:
    return check_number(name, seconds, 0, MAX_WAIT, InvalidArgument)


def _iterable(value: object, name: str, of: str) -> list[Any]:
    if isinstance(value, str | bytes | bytearray | Mapping) or not isinstance(value, Iterable):
        raise InvalidArgument(f"{name} must be {of}, got {type(value).__name__}")
    return list(value)


def check_message(message: object, name: str = "message") -> Message:
    """A delivery as ``claim`` returned it. A hand-made one must still name a valid topic
    and group and a slot and delivery number, so it can only reach its own topic's keys."""
    if not isinstance(message, Message):
        raise InvalidArgument(f"{name} must be a Message (as claim returns), got "
                              f"{type(message).__name__}")
    check_topic_name(message.topic)
    check_group_name(message.group)
    check_int(f"{name}.slot", message.slot, 0, MAX_SLOTS - 1, InvalidArgument)
    check_int(f"{name}.seq", message.seq, 0, 2**53, InvalidArgument)
    if type(message.generation) is not str:
        raise InvalidArgument(f"{name}.generation must be a str (as claim sets it), got "
                              f"{type(message.generation).__name__}")
    return message


def check_messages(messages: object, name: str = "messages") -> list[Message]:
    """One Message, or an iterable of them (a list, a tuple, ...)."""
    if isinstance(messages, Message):
        return [check_message(messages, name)]
    batch = _iterable(messages, name, "a Message or a list of Messages")
    # Names are checked once per topic and group (acks are hot): the last ones checked are
    # told by identity (the messages of one claim share its strings), others looked up.
    names: set[tuple[str, str]] = set()
    topic: object = _NOTHING_CHECKED
    group: object = _NOTHING_CHECKED
    for index, message in enumerate(batch):
        if not (isinstance(message, Message)
                and ((message.topic is topic and message.group is group)
                     or (message.topic, message.group) in names)
                and type(message.slot) is int and 0 <= message.slot < MAX_SLOTS
                and type(message.seq) is int and message.seq >= 0
                and type(message.generation) is str):
            check_message(message, f"{name}[{index}]")
            names.add((message.topic, message.group))
            topic, group = message.topic, message.group
    return batch


def check_error(error: object) -> str:
    """What ``nack`` records: the text, or ``"<ExceptionType>: <message>"``."""
    if isinstance(error, str):
        return error
    if isinstance(error, BaseException):
        return f"{type(error).__name__}: {error}"
    raise InvalidArgument(f"error must be a str or an exception, got {type(error).__name__}")


def check_ids(ids: object) -> list[str] | None:
    if ids is None:
        return None
    found = _iterable(ids, "ids", "None or a list of dead-letter ids")
    for dead_id in found:
        if not isinstance(dead_id, str):
            raise InvalidArgument(f"ids must be dead-letter ids (str), got {dead_id!r}")
    return found


def check_flag(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise InvalidArgument(f"{name} must be True or False, got {value!r}")
    return value


def check_state(state: object) -> ConsumerState:
    if not isinstance(state, ConsumerState):
        raise InvalidArgument(f"state must be a ConsumerState, got {type(state).__name__}")
    check_topic_name(state.topic)
    check_group_name(state.group)
    check_consumer_id(state.id)
    return state


def check_consumer_id(consumer_id: object, name: str = "a consumer id") -> str:
    if not isinstance(consumer_id, str) or not 1 <= len(consumer_id) <= 256:
        raise InvalidArgument(f"{name} must be a str of 1-256 characters, got "
                              f"{consumer_id!r}")
    return consumer_id


def check_names(groups: object) -> list[str] | None:
    """None, or group names."""
    if groups is None:
        return None
    return [check_group_name(g) for g in _iterable(groups, "groups", "None or group names")]


def check_slots(slots: object, count: int) -> list[int] | None:
    """None, or slot numbers of a topic of ``count`` slots."""
    if slots is None:
        return None
    return [check_int("slot", s, 0, count - 1, InvalidArgument)
            for s in _iterable(slots, "slots", "None or slot numbers")]
