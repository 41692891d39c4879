"""Topic settings and the names of topics and groups, validated in one place."""

from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, fields, replace
from typing import Any

from .errors import InputError, InvalidArgument, InvalidGroupName, InvalidSetting, InvalidTopicName

__all__ = ["TopicSettings", "GroupLimits", "check_topic_name", "check_group_name", "check_int",
           "check_number", "DEFAULT_GROUP", "MAX_LEASE", "MERGE_MODES"]

DEFAULT_GROUP = "default"
_NAME = re.compile(r"[A-Za-z0-9._-]{1,128}")
_DAY = 86_400.0
MAX_LEASE = 7 * _DAY  # the longest lease or visibility timeout, in seconds
MERGE_MODES = ("body", "key")  # what makes two pending messages one (TopicSettings.merge)


def check_topic_name(name: object) -> str:
    """``name`` if it is 1-128 characters of ``A-Z a-z 0-9 . _ -``; else InvalidTopicName.

    The charset is what keeps a name from addressing another topic's keys: it cannot
    contain the ``{}`` of a hash tag or the ``:`` that separates key parts.
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidTopicName(
            f"invalid topic name {name!r}: use 1-128 characters of A-Z a-z 0-9 . _ -"
        )
    return name


def check_group_name(name: object) -> str:
    """``name`` if it is a valid group name (same rule as topics); else InvalidGroupName."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise InvalidGroupName(
            f"invalid group name {name!r}: use 1-128 characters of A-Z a-z 0-9 . _ -"
        )
    return name


@dataclass(frozen=True, slots=True)
class TopicSettings:
    """A topic's settings (SPEC §1). Times are in seconds.

    slots: shards of the topic, a power of two from 1 to 1024; fixed at creation.
    max_retries: a message is delivered at most 1 + max_retries times, then dead-lettered.
    visibility_timeout: the lease of a claim; a running handler's lease is extended.
    max_message_bytes: the largest message accepted: its body, tag and properties as stored.
    max_delay: how far ahead ``delay_ms`` or ``deliver_at`` may point.
    retry_backoff: wait before the first retry, doubling for each later one (0: at once).
    retry_backoff_max: the cap of that wait.
    serial_keys: never run two messages with the same key at once, anywhere in a group,
        and run them in send order within a priority.
    check_after, check_interval, max_checks, tx_retention: transactions (SPEC §12,
        docs/transactions.md): an open one is checked back ``check_after`` after its last
        half send, again every ``check_interval`` while unknown, at most ``max_checks``
        times; a closed one's id is remembered for ``tx_retention``.
    trace: record every state change of every message in each group (docs/trace.md).
    trace_retention: how long a recorded event is kept, in seconds.
    trace_cap: at most this many events kept per slot (the oldest go first).
    version_retention: on a topic merging by key, how long the highest version sent for a
        key is remembered after its last versioned send, in seconds (docs/semantics.md,
        "Versions"); never while a value of the key is pending.
    merge: what makes two sends one pending message (docs/semantics.md): ``"body"``, the
        same body, key, tag and properties; ``"key"``, the same key (else slot basis, else
        body), the newest send's body, tag and properties winning. Fixed at creation.
    """

    slots: int = 8
    max_retries: int = 16
    visibility_timeout: float = 30.0
    max_message_bytes: int = 4 * 1024 * 1024
    max_delay: float = 30 * _DAY
    retry_backoff: float = 1.0
    retry_backoff_max: float = 300.0
    serial_keys: bool = False
    check_after: float = 6.0
    check_interval: float = 30.0
    max_checks: int = 15
    tx_retention: float = _DAY
    trace: bool = False
    trace_retention: float = _DAY
    trace_cap: int = 10_000
    merge: str = "body"
    version_retention: float = _DAY

    def __post_init__(self) -> None:
        check_int("slots", self.slots, 1, 1024)
        if self.slots & (self.slots - 1):
            raise InvalidSetting(f"slots must be a power of two, got {self.slots}")
        check_int("max_retries", self.max_retries, 0, 1_000_000)
        check_number("visibility_timeout", self.visibility_timeout, 0.01, MAX_LEASE)
        check_int("max_message_bytes", self.max_message_bytes, 1, 512 * 1024 * 1024)
        check_number("max_delay", self.max_delay, 0.001, 10 * 365 * _DAY)
        check_number("retry_backoff", self.retry_backoff, 0, _DAY)
        check_number("retry_backoff_max", self.retry_backoff_max, 0, 30 * _DAY)
        if not isinstance(self.serial_keys, bool):
            raise InvalidSetting(f"serial_keys must be True or False, got {self.serial_keys!r}")
        check_number("check_after", self.check_after, 0.001, _DAY)
        check_number("check_interval", self.check_interval, 0.001, _DAY)
        check_int("max_checks", self.max_checks, 1, 1_000_000)
        check_number("tx_retention", self.tx_retention, 1, 365 * _DAY)
        if not isinstance(self.trace, bool):
            raise InvalidSetting(f"trace must be True or False, got {self.trace!r}")
        check_number("trace_retention", self.trace_retention, 1, 30 * _DAY)
        check_int("trace_cap", self.trace_cap, 1, 10_000_000)
        check_number("version_retention", self.version_retention, 1, 365 * _DAY)
        if self.merge not in MERGE_MODES:
            raise InvalidSetting(f"merge must be \"body\" or \"key\", got {self.merge!r}")

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls))

    @classmethod
    def build(cls, **settings: Any) -> TopicSettings:
        """Settings from keyword arguments, naming any unknown one."""
        unknown = sorted(set(settings) - set(cls.names()))
        if unknown:
            raise InvalidSetting(
                f"unknown topic setting(s) {', '.join(unknown)}; known: {', '.join(cls.names())}"
            )
        return cls(**settings)

    def altered(self, **changes: Any) -> TopicSettings:
        """A copy with ``changes``; ``slots`` and ``merge`` are fixed at creation: the
        stored messages' places and identities follow them."""
        if "slots" in changes and changes["slots"] != self.slots:
            raise InvalidSetting("slots cannot be changed after a topic is created")
        if "merge" in changes and changes["merge"] != self.merge:
            raise InvalidSetting(
                f"merge cannot be changed after a topic is created (it is {self.merge!r}): "
                "its pending, in-flight, dead and half messages are stored under the "
                "identity it gives them; create a new topic with the other merge")
        unknown = sorted(set(changes) - set(self.names()))
        if unknown:
            raise InvalidSetting(f"unknown topic setting(s) {', '.join(unknown)}")
        return replace(self, **changes)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> TopicSettings:
        return cls(**json.loads(text))

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


MAX_LIMIT = 1_000_000  # the largest max_in_flight, and the largest count of a rate
MIN_RATE_SECONDS = 0.001


@dataclass(frozen=True, slots=True)
class GroupLimits:
    """A group's fleet-wide limits (SPEC §10), held by every consumer of the group together.

    max_in_flight: at most this many of the group's messages in flight at any moment
        (1 to 1 000 000), or None for no such limit.
    rate: ``(count, seconds)``: at most ``count`` of the group's messages claimed in any
        ``seconds`` (count 1 to 1 000 000, seconds 0.001 to 86 400), or None.
    max_batches: at most this many of the group's claims in flight at any moment (1 to
        1 000 000), or None: a claim, a batch consumer's batch or a ``claim(count)`` alike,
        is in flight while any message it took is; what a pool of N GPUs rendering in
        batches holds to N.

    A bad value raises :class:`~rmq.errors.InvalidArgument` naming it.
    """

    max_in_flight: int | None = None
    rate: tuple[int, float] | None = None
    max_batches: int | None = None

    def __post_init__(self) -> None:
        if self.max_in_flight is not None:
            check_int("max_in_flight", self.max_in_flight, 1, MAX_LIMIT, InvalidArgument)
        if self.rate is not None:
            if isinstance(self.rate, str | bytes) or not isinstance(self.rate, tuple | list) \
                    or len(self.rate) != 2:
                raise InvalidArgument(
                    f"rate must be (count, seconds) or None, got {self.rate!r}")
            count, seconds = self.rate
            check_int("rate count", count, 1, MAX_LIMIT, InvalidArgument)
            check_number("rate seconds", seconds, MIN_RATE_SECONDS, _DAY, InvalidArgument)
            object.__setattr__(self, "rate", (count, seconds))
        if self.max_batches is not None:
            check_int("max_batches", self.max_batches, 1, MAX_LIMIT, InvalidArgument)

    @property
    def unlimited(self) -> bool:
        """True when no limit is set."""
        return self.max_in_flight is None and self.rate is None and self.max_batches is None

    @property
    def holds_permits(self) -> bool:
        """Whether the group's deliveries hold permits, which settling them frees: under a
        max_in_flight or a max_batches (a claim is in flight while one of its permits is)."""
        return self.max_in_flight is not None or self.max_batches is not None

    def to_json(self) -> str:
        stored: dict[str, Any] = {"max_in_flight": self.max_in_flight,
                                  "rate": None if self.rate is None else list(self.rate)}
        if self.max_batches is not None:  # absent otherwise: what clients before it read
            stored["max_batches"] = self.max_batches
        return json.dumps(stored, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> GroupLimits:
        stored = json.loads(text)
        if not isinstance(stored, dict) or not {"max_in_flight", "rate"} <= set(stored) <= {
                "max_in_flight", "rate", "max_batches"}:
            raise ValueError(f"not a group's limits: {text!r}")
        rate = stored["rate"]
        return cls(stored["max_in_flight"], None if rate is None else tuple(rate),
                   stored.get("max_batches"))


def check_int(name: str, value: object, low: int, high: int,
              error: type[InputError] = InvalidSetting) -> int:
    """``value`` if it is an integer (not a bool) from ``low`` to ``high``; else ``error``
    naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise error(f"{name} must be an integer from {low} to {high}, got {value!r}")
    return value


def check_number(name: str, value: object, low: float, high: float,
                 error: type[InputError] = InvalidSetting) -> float:
    """``value`` if it is a finite number (not a bool) from ``low`` to ``high``; else
    ``error`` naming ``name`` (NaN is never in range)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
        raise error(f"{name} must be a number from {low:g} to {high:g}, got {value!r}")
    return value
