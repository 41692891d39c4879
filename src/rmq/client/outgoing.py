"""Turning a send's arguments into what is stored: validation, slot, member, due time.

Everything is checked here, before any write, so a bad send (or one bad item of a batch)
leaves Redis untouched.
"""

from __future__ import annotations

import json as _json
import math
import zlib
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from ..errors import (
    ConflictingOptions,
    DeliverAtInPast,
    InputError,
    InvalidArgument,
    InvalidDelay,
    InvalidMessage,
    InvalidPriority,
    MessageTooLarge,
)
from ..message import Priority
from ..properties import check_properties, check_tag
from ..settings import TopicSettings
from ..storage.codec import encode_member, encode_properties
from ..storage.queue import Outgoing

__all__ = ["MISSING", "prepare", "prepare_batch", "canonical_json", "MAX_KEY_BYTES"]

MAX_KEY_BYTES = 64 * 1024
_SEND_OPTIONS = frozenset(
    {"body", "json", "priority", "delay_ms", "deliver_at", "slot_basis", "key", "tag",
     "properties", "version"}
)
MISSING: Any = object()  # "not given", distinct from None
MAX_VERSION = 2**53  # versions are below it: exact as a Lua number (lua/includes/versions.lua)


def canonical_json(obj: Any) -> bytes:
    """JSON with sorted keys and no spaces, so equal objects give equal bodies and merge."""
    try:
        return _json.dumps(
            obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False
        ).encode("utf-8")
    except (TypeError, ValueError) as exc:
        raise InvalidMessage(f"json value cannot be serialised: {exc}") from None
    except RecursionError:  # a structure nested deeper than Python's recursion limit
        raise InvalidMessage("json value is nested too deeply to serialise") from None


def as_bytes(what: str, value: object) -> bytes:
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise InvalidMessage(f"{what} is not encodable as UTF-8: {exc}") from None
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise InvalidMessage(f"{what} must be bytes or str, got {type(value).__name__}")


DEFAULT_PRIORITY = int(Priority.MEDIUM)


def _priority(value: object) -> int:
    if value is None:
        return DEFAULT_PRIORITY
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 255:
        raise InvalidPriority(f"priority must be an integer from 0 to 255, got {value!r}")
    return int(value)


def _version(settings: TopicSettings, value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < MAX_VERSION:
        raise InvalidArgument(f"version must be an integer from 0 to 2**53 - 1, got {value!r}")
    if settings.merge != "key":
        raise ConflictingOptions(
            "version= orders the values of one key: only a topic merging by key "
            "(merge=\"key\") takes it; this topic merges by body")
    return int(value)


def _due_at(settings: TopicSettings, now: int, delay_ms: object, deliver_at: object) -> int:
    horizon = now + int(settings.max_delay * 1000)
    if delay_ms is not None and deliver_at is not None:
        raise ConflictingOptions("delay_ms and deliver_at cannot be combined: choose one")
    if delay_ms is not None:
        if isinstance(delay_ms, bool) or not isinstance(delay_ms, int | float):
            raise InvalidDelay(f"delay_ms must be a number of milliseconds, got {delay_ms!r}")
        if not delay_ms > 0:  # also refuses NaN
            raise InvalidDelay(f"delay_ms must be positive, got {delay_ms!r}")
        if not math.isfinite(delay_ms):
            raise InvalidDelay(f"delay_ms must be finite, got {delay_ms!r}")
        due = now + int(delay_ms)
        if due > horizon:
            raise InvalidDelay(
                f"delay_ms={delay_ms!r} is beyond the topic's max_delay of {settings.max_delay}s"
            )
        return max(due, now + 1)
    if deliver_at is not None:
        if isinstance(deliver_at, datetime):
            if deliver_at.tzinfo is None or deliver_at.utcoffset() is None:
                raise InvalidDelay(f"deliver_at must be a timezone-aware datetime: {deliver_at}")
            due = int(deliver_at.timestamp() * 1000)
        elif isinstance(deliver_at, int) and not isinstance(deliver_at, bool):
            due = deliver_at
        else:
            raise InvalidDelay(
                f"deliver_at must be an aware datetime or epoch milliseconds, got {deliver_at!r}"
            )
        if due <= now:
            raise DeliverAtInPast(f"deliver_at {due} ms is not in the future (now is {now} ms)")
        if due > horizon:
            raise InvalidDelay(
                f"deliver_at {due} ms is beyond the topic's max_delay of {settings.max_delay}s"
            )
        return due
    return now


def _plain(settings: TopicSettings, now: int, body: object) -> Outgoing | None:
    """The common send, a bytes body and no options, as ``prepare`` would store it, or None
    when ``body`` needs ``prepare``'s checks. Single sends and batches are mostly this, and
    the checks cost a send several times its own time here."""
    if type(body) is bytes and len(body) <= settings.max_message_bytes and body[:1] != b"\0":
        return Outgoing(zlib.crc32(body) & (settings.slots - 1), body, DEFAULT_PRIORITY, now)
    return None


def prepare(
    settings: TopicSettings,
    now: int,
    body: Any = MISSING,
    json: Any = MISSING,
    priority: object = None,
    delay_ms: object = None,
    deliver_at: object = None,
    slot_basis: object = None,
    key: object = None,
    tag: object = None,
    properties: object = None,
    version: object = None,
) -> Outgoing:
    """Validate one send and compute what to store. Raises the SPEC §2 and §13 errors. The
    options may be passed by position, in this order (the clients' ``send`` does, per
    message). ``version``: docs/semantics.md, "Versions"."""
    if (json is MISSING and priority is None and delay_ms is None and deliver_at is None
            and slot_basis is None and key is None and tag is None and properties is None
            and version is None):
        plain = _plain(settings, now, body)
        if plain is not None:
            return plain
    if body is not MISSING and json is not MISSING:
        raise ConflictingOptions("give either a body or json=, not both")
    if json is not MISSING:
        data = canonical_json(json)
    elif body is MISSING or body is None:
        raise InvalidMessage("a message needs a body (bytes or str) or json=")
    else:
        data = as_bytes("body", body)
    size = len(data)
    encoded = b""
    if tag is not None or properties is not None:
        # they are stored with the body, so they count against the same limit
        tag = check_tag(tag)
        encoded = encode_properties(check_properties(properties))
        size += len(encoded) + (len(tag) if tag is not None else 0)
    if size > settings.max_message_bytes:
        what = f"body of {size} bytes" if size == len(data) else (
            f"message of {size} bytes (body {len(data)}, tag and properties as stored "
            f"{size - len(data)})")
        raise MessageTooLarge(f"{what} exceeds the topic's max_message_bytes "
                              f"of {settings.max_message_bytes}")
    basis = None if slot_basis is None else as_bytes("slot_basis", slot_basis)
    key_bytes = None if key is None else as_bytes("key", key)
    for what, value in (("key", key_bytes), ("slot_basis", basis)):
        if value is not None and len(value) > MAX_KEY_BYTES:
            raise InvalidMessage(f"{what} of {len(value)} bytes exceeds {MAX_KEY_BYTES} bytes")
    if basis is not None and key_bytes is not None and basis != key_bytes:
        if settings.serial_keys:
            raise ConflictingOptions(
                "on a serial_keys topic a message's key decides its slot: "
                "slot_basis and key must be equal when both are given"
            )
        if settings.merge == "key":
            raise ConflictingOptions(
                "on a topic merging by key a message's key is what it merges by and "
                "decides its slot: slot_basis and key must be equal when both are given"
            )
    # The key defaults to the slot basis; a key without a slot basis decides the slot, so
    # messages of one key always share a slot (what key-serial order and locks rely on).
    effective_key = key_bytes if key_bytes is not None else basis
    basis_for_slot = basis if basis is not None else effective_key
    slot = zlib.crc32(data if basis_for_slot is None else basis_for_slot) & (settings.slots - 1)
    return Outgoing(
        slot=slot,
        member=encode_member(data, effective_key, tag, encoded),
        priority=_priority(priority),
        due_at=_due_at(settings, now, delay_ms, deliver_at),
        version=None if version is None else _version(settings, version),
    )


def prepare_batch(settings: TopicSettings, now: int, items: object) -> list[Outgoing]:
    """Validate a whole batch; the first bad item raises, naming its index."""
    if isinstance(items, bytes | str | Mapping) or not hasattr(items, "__iter__"):
        raise InvalidMessage("send_many takes an iterable of bodies or of dicts of send options")
    prepared = []
    for index, item in enumerate(items):
        plain = _plain(settings, now, item)
        if plain is not None:
            prepared.append(plain)
            continue
        try:
            if isinstance(item, Mapping):
                unknown = set(item) - _SEND_OPTIONS
                if unknown:
                    raise InvalidMessage(f"unknown send option(s) {sorted(unknown)}")
                prepared.append(prepare(settings, now, **item))
            else:
                prepared.append(prepare(settings, now, item))
        except InputError as exc:
            raise type(exc)(f"batch item {index}: {exc}") from None
    return prepared
