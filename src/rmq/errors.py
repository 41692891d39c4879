"""The exceptions RMQ raises.

Every error is an :class:`RMQError`. Errors caused by the caller's input are also
:class:`ValueError`, so code that validates input generically still catches them. Each message
names the offending value, so one line of a log says what went wrong.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = [
    "RMQError",
    "InputError",
    "UnknownTopic",
    "InvalidTopicName",
    "InvalidGroupName",
    "InvalidSetting",
    "MessageTooLarge",
    "InvalidPriority",
    "InvalidDelay",
    "DeliverAtInPast",
    "ConflictingOptions",
    "InvalidMessage",
    "TopicConflict",
    "InvalidQuery",
    "UnknownMessage",
    "InvalidTag",
    "InvalidProperties",
    "InvalidFilter",
    "RedisUnavailable",
    "RedisOutOfMemory",
    "NotReplicated",
    "AccessDenied",
    "ServerNotFound",
    "InvalidArgument",
    "UnboundGroup",
    "InvalidURL",
    "InvalidClock",
    "CorruptRegistry",
    "CorruptMessage",
    "WrongKeyType",
    "MissingExtra",
    "TransactionClosed",
    "BatchFailed",
    "AwaitableReturned",
]


class RMQError(Exception):
    """Base class of every error RMQ raises."""


class InputError(RMQError, ValueError):
    """The caller passed something RMQ cannot accept; nothing was written."""


class UnknownTopic(InputError):
    """The topic was never created (or was deleted). ``fix`` says how to create it in the
    words of the caller's tool (the library's ``create_topic()`` by default)."""

    def __init__(self, topic: str, fix: str = "create it first with create_topic()"):
        super().__init__(f"unknown topic {topic!r}: {fix}")
        self.topic = topic


class InvalidTopicName(InputError):
    """A topic name outside 1-128 characters of ``A-Z a-z 0-9 . _ -``."""


class InvalidGroupName(InputError):
    """A group name outside 1-128 characters of ``A-Z a-z 0-9 . _ -``."""


class InvalidSetting(InputError):
    """A topic setting out of its documented range."""


class MessageTooLarge(InputError):
    """A message (body, tag and properties as stored) longer than the topic's
    ``max_message_bytes``."""


class InvalidPriority(InputError):
    """A priority that is not an integer from 0 to 255."""


class InvalidDelay(InputError):
    """A ``delay_ms`` that is not positive, or lands beyond the topic's ``max_delay``."""


class DeliverAtInPast(InputError):
    """A ``deliver_at`` that is not strictly in the future."""


class ConflictingOptions(InputError):
    """Options that cannot be combined, such as ``delay_ms`` with ``deliver_at``."""


class InvalidArgument(InputError):
    """An argument of the wrong type or outside its range (a lease, a count, a consumer's
    concurrency, the messages to acknowledge, ...); the message names the argument."""


class UnboundGroup(InvalidArgument):
    """A group's limits set while the group is not bound to the topic (it receives no
    messages, so a limit of it would hold nothing). ``fix`` says how to bind it in the
    words of the caller's tool."""

    def __init__(self, topic: str, group: str, bound: tuple[str, ...], fix: str = ""):
        self.topic, self.group, self.bound, self.fix = topic, group, tuple(bound), fix
        fix = fix or f"bind it first with bind({topic!r}, {group!r})"
        super().__init__(f"group {group!r} is not bound to topic {topic!r} (its groups: "
                         f"{', '.join(bound)}), so no limit of it would hold anything: {fix}")

    def __reduce__(self) -> tuple[Any, ...]:  # pickled with its arguments, not its text
        return type(self), (self.topic, self.group, self.bound, self.fix)


class InvalidURL(InputError):
    """A Redis URL RMQ cannot connect with: another scheme than ``redis://``, ``rediss://``
    or ``unix://``, a malformed port or option, or a database the server does not have."""


class InvalidMessage(InputError):
    """A body, key or slot basis of the wrong type, or a batch item of the wrong shape."""


class TopicConflict(InputError):
    """``create_topic`` for an existing topic with other values of the settings it was
    given. ``differences`` maps each such setting to (the topic's value, the value asked
    for); ``fixed`` names those of them that cannot change after creation; ``alter`` says
    how to change the others, in the words of the caller's tool."""

    def __init__(self, topic: str, differences: dict[str, tuple[Any, Any]],
                 fixed: tuple[str, ...] = (), alter: str = "use alter_topic() to change them"):
        self.topic, self.differences, self.fixed = topic, dict(differences), tuple(fixed)
        self.alter = alter
        listed = "; ".join(f"{name} {old}, not {new}"
                           for name, (old, new) in self.differences.items())
        fixes = [alter] if set(self.differences) - set(self.fixed) else []
        if self.fixed:
            fixes.append(f"{' and '.join(self.fixed)} cannot change after creation")
        super().__init__(f"topic {topic!r} exists with other settings ({listed}): "
                         f"{'; '.join(fixes)}")

    def __reduce__(self) -> tuple[Any, ...]:  # pickled (Spark) with its arguments, not text
        return type(self), (self.topic, self.differences, self.fixed, self.alter)


class UnknownMessage(InputError):
    """An operation named a message (by its id) that is not there: ``cancel`` of a message
    no group holds pending or running."""


class InvalidQuery(InputError):
    """A read (peek, find, history) asked for what cannot exist: an unknown state, a slot
    out of range, a negative offset, nothing to look for."""


class InvalidTag(InputError):
    """A message tag outside 1-128 characters of ``A-Z a-z 0-9 . _ -``."""


class InvalidProperties(InputError):
    """Message properties that are not a dict of at most 64 identifiers to str, int (within
    +-2**53), finite float or bool."""


class InvalidFilter(InputError):
    """A tag expression or ``where`` expression that does not parse. ``column`` is the
    1-based position of the problem in ``expression``; ``expected`` says what would have
    been accepted there."""

    def __init__(self, what: str, expression: str, column: int, expected: str, found: str):
        super().__init__(f"invalid {what} {expression!r}: at column {column}, expected "
                         f"{expected}, found {found}")
        self.expression = expression
        self.column = column
        self.expected = expected


class RedisUnavailable(RMQError):
    """Redis could not be reached after the client's bounded reconnect attempts."""


class RedisOutOfMemory(RMQError):
    """Redis refused a write because it reached ``maxmemory``; the write did not happen."""


class NotReplicated(RMQError):
    """A write that the primary stored but fewer replicas than the client asked for
    acknowledged in time (``Client(replicas=N)``): it may be lost if the primary fails now,
    and may also still be replicated later, so a retry can store it twice. ``acknowledged``
    and ``wanted`` are the counts of replicas, ``local_fsync`` whether the primary's own
    append-only file had it on disk (None: not asked)."""

    def __init__(self, message: str, *, acknowledged: int, wanted: int,
                 local_fsync: bool | None = None):
        super().__init__(message)
        self.acknowledged = acknowledged
        self.wanted = wanted
        self.local_fsync = local_fsync


class AccessDenied(RMQError):
    """Redis's ACL refused a command or key to this user (NOPERM): grant the user the
    ``rmq:*`` keys and channels (``~rmq:* &rmq:*``) and the commands RMQ runs."""


class ServerNotFound(RMQError):
    """No Redis-compatible server binary was found to start the embedded server."""


class MissingExtra(RMQError, ImportError):
    """An optional extra (pyproject's optional-dependencies) a tool needs is not installed;
    the message names the install command."""

    def __init__(self, extra: str, message: str):
        super().__init__(message)
        self.extra = extra


class InvalidClock(RMQError):
    """A clock that reads outside what RMQ can store (2024-01-01 to 2080-01-01): the Redis
    server's own clock, or a ``clock`` given to the client."""


class CorruptRegistry(RMQError):
    """A topic's registry entry in Redis cannot be read (its settings are not RMQ's JSON:
    written by something else, or damaged). Names the topic; operations over every topic
    skip it."""

    def __init__(self, topic: str, problem: str):
        super().__init__(f"topic {topic!r} has a corrupt registry entry ({problem}); "
                         "inspect its registry keys, or delete the topic")
        self.topic = topic
        self.problem = problem


class CorruptMessage(RMQError):
    """A stored message RMQ cannot decode (a pending member, an in-flight or dead record, a
    pending value of a topic merging by key, an attempts count): another program wrote it,
    or it was damaged. Readers report it rather than raise it: ``snapshot``, ``peek`` and
    ``find_messages`` show it as a row marked ``corrupt``, ``dead_letters`` as a dead letter
    so marked, with this error's text as their ``error``. ``what`` names the stored part,
    ``problem`` what failed; the text quotes the first 64 of the ``stored`` bytes."""

    def __init__(self, what: str, stored: bytes, problem: str):
        preview = repr(stored[:64]) + ("..." if len(stored) > 64 else "")
        super().__init__(f"cannot decode the stored {what} ({len(stored)} bytes, {preview}): "
                         f"{problem}")
        self.what, self.stored, self.problem = what, stored, problem

    def __reduce__(self) -> tuple[Any, ...]:  # pickled with its arguments, not its text
        return type(self), (self.what, self.stored, self.problem)


class WrongKeyType(RMQError):
    """A key RMQ reads holds another Redis type than the one RMQ keeps there (Redis answered
    ``WRONGTYPE``): another program wrote it. A registry key so written makes the topic's
    entry a :class:`CorruptRegistry`, which names the key."""


class TransactionClosed(RMQError):
    """A send, commit or rollback on a transaction already closed the other way (a commit
    after a rollback, a rollback after a commit), or a send on a closed transaction: its id
    is remembered for the topic's ``tx_retention``. ``state`` is "committed" or
    "rolled_back"."""

    def __init__(self, topic: str, transaction_id: str, state: str, what: str):
        super().__init__(f"transaction {transaction_id!r} of topic {topic!r} is "
                         f"{state.replace('_', ' ')}: cannot {what}")
        self.topic = topic
        self.transaction_id = transaction_id
        self.state = state


class BatchFailed(RMQError):
    """Raised by a batch handler (``Consumer(..., batch=N)``) when some of its messages
    failed: ``failures`` maps each failed one (a :class:`~rmq.Message` of the batch, its
    delivery id ``message.id`` or its ``message_id``) to its error (an exception, or a text
    recorded as it is). Those are retried (an attempt each, each with its own error); the
    rest of the batch is acknowledged. One that names no message of the batch makes the
    whole batch fail, as any other exception does. Building one checks its entries: a name
    that is no message and no non-empty text, or an error that is no exception and no
    non-empty text (``None`` would acknowledge what it names as failed), raises
    :class:`InvalidArgument` naming the entry, so the handler fails the whole batch."""

    def __init__(self, failures: Mapping[Any, BaseException | str]):
        if not isinstance(failures, Mapping):
            raise InvalidArgument("BatchFailed takes a dict of message -> error, got "
                                  f"{type(failures).__name__}")
        for name, error in failures.items():
            if not (_names_a_message(name)
                    and (isinstance(error, BaseException) or _is_text(error))):
                named = getattr(name, "id", name)  # a Message by its delivery id
                raise InvalidArgument(
                    f"BatchFailed entry {named!r}: {error!r}: each key must be a Message of "
                    "the batch (or its id or message_id), each value the failure's error, "
                    "an exception or a non-empty str")
        self.failures = dict(failures)
        named = ", ".join(str(getattr(name, "id", name)) for name in self.failures)
        super().__init__(f"{len(self.failures)} message(s) of the batch failed: {named}")


def _is_text(value: object) -> bool:
    return isinstance(value, str) and value != ""


def _names_a_message(name: object) -> bool:
    """A Message (rmq.message is above this module: known by its two ids), or an id."""
    return _is_text(name) or (_is_text(getattr(name, "id", None))
                               and _is_text(getattr(name, "message_id", None)))


class AwaitableReturned(RMQError):
    """A plain (not ``async``) handler returned an awaitable, such as the coroutine of an
    ``async`` function it called without awaiting, or a sync wrapper's: a consumer runs a
    plain handler in a thread and does not await what it returns, so the delivery fails
    with this error (retried, then dead-lettered) rather than being acknowledged unhandled.
    Declare the handler ``async def`` (an object's ``async def __call__`` and a
    ``functools.partial`` of an ``async`` function are run as ``async`` too)."""

    def __init__(self, handler: Any, returned: Any):
        self.handler = handler
        name = getattr(handler, "__qualname__", None) or type(handler).__qualname__
        super().__init__(f"handler {name} is not async but returned "
                         f"{type(returned).__name__} {returned!r}, which is never awaited: "
                         "declare it async def")
