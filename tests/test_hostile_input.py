"""Hostile input (SPEC §2): random bodies, keys, priorities, delays, fixed times and option
combinations, each either stored and delivered exactly as sent, or refused with one of the
documented errors and nothing written. The oracle below is SPEC §2 restated: for each option
the errors it may cause; a send must succeed when none applies, and may only raise one of
those that apply."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import START_MS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rmq
from rmq.errors import (
    ConflictingOptions,
    DeliverAtInPast,
    InputError,
    InvalidDelay,
    InvalidMessage,
    InvalidPriority,
    MessageTooLarge,
    RMQError,
)

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]

LIMIT = 2048  # the fuzzed topic's max_message_bytes
MAX_DELAY_S = 3600.0
FUZZ = settings(max_examples=80, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])

bodies = st.one_of(
    st.binary(max_size=64),
    st.binary(min_size=LIMIT - 2, max_size=LIMIT + 2),  # around the limit
    st.just(b""),
    st.binary(max_size=16).map(lambda b: b"\x00" + b),  # NUL-leading (the member escape)
    st.binary(max_size=16).map(lambda b: b"\xff\xfe" + b),  # invalid UTF-8
    st.text(max_size=32),  # str, including lone surrogates that cannot be encoded
    st.text(min_size=LIMIT // 4, max_size=LIMIT // 2),  # multi-byte characters near the limit
    st.sampled_from([None, 7, 1.5, ["list"], {"a": 1}, bytearray(b"ba"), memoryview(b"mv")]),
)
priorities = st.one_of(st.none(), st.integers(-3, 260), st.booleans(),
                       st.sampled_from([1.0, "5", float("nan")]))
delays = st.one_of(st.none(), st.integers(-5, int(MAX_DELAY_S * 1000) + 5),
                   st.floats(allow_nan=True, allow_infinity=True), st.booleans(),
                   st.sampled_from(["10", b"10"]))
at_offsets = st.integers(-5, int(MAX_DELAY_S * 1000) + 5)
deliver_ats = st.one_of(
    st.none(),
    at_offsets.map(lambda ms: ("epoch", ms)),
    at_offsets.map(lambda ms: ("aware", ms)),
    at_offsets.map(lambda ms: ("naive", ms)),
    st.sampled_from([("other", "tomorrow"), ("other", 1.5e12), ("other", True)]),
)
keys = st.one_of(st.none(), st.binary(max_size=12), st.text(max_size=12),
                 st.sampled_from([5, b"\x00k", b"k" * (64 * 1024 + 1)]))


def _deliver_at(spec: Any) -> Any:
    if spec is None:
        return None
    kind, value = spec
    if kind == "epoch":
        return START_MS + value
    if kind in ("aware", "naive"):
        moment = datetime.fromtimestamp((START_MS + value) / 1000, UTC)
        # An aware time in another zone is the same instant.
        return moment.astimezone(timezone(timedelta(hours=5))) if kind == "aware" else \
            moment.replace(tzinfo=None)
    return value


def _as_bytes(value: Any) -> bytes | None:
    """What a body/key of this value is stored as, or None if SPEC refuses it."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        try:
            return value.encode("utf-8")
        except UnicodeEncodeError:
            return None
    return None


def expected_errors(body: Any, priority: Any, delay_ms: Any, at_spec: Any, key: Any,
                    slot_basis: Any) -> set[type[RMQError]]:
    """The documented errors this send may raise (empty: it must succeed)."""
    errors: set[type[RMQError]] = set()
    data = _as_bytes(body)
    if data is None:
        errors.add(InvalidMessage)
    elif len(data) > LIMIT:
        errors.add(MessageTooLarge)
    if priority is not None and (isinstance(priority, bool) or not isinstance(priority, int)
                                 or not 0 <= priority <= 255):
        errors.add(InvalidPriority)
    if delay_ms is not None and at_spec is not None:
        errors.add(ConflictingOptions)
    if delay_ms is not None and (isinstance(delay_ms, bool)
                                 or not isinstance(delay_ms, int | float)
                                 or math.isnan(delay_ms) or delay_ms <= 0
                                 or math.isinf(delay_ms)
                                 or int(delay_ms) > MAX_DELAY_S * 1000):  # whole ms count
        errors.add(InvalidDelay)
    if at_spec is not None:
        kind, value = at_spec
        if kind in ("other", "naive"):
            errors.add(InvalidDelay)
        elif value <= 0:
            errors.add(DeliverAtInPast)
        elif value > MAX_DELAY_S * 1000:
            errors.add(InvalidDelay)
    for value in (key, slot_basis):
        if value is not None:
            raw = _as_bytes(value)
            if raw is None or len(raw) > 64 * 1024:
                errors.add(InvalidMessage)
    return errors


def _fuzz_topic(client: rmq.Client) -> str:
    client.create_topic("fuzz", slots=4, max_message_bytes=LIMIT, max_delay=MAX_DELAY_S)
    return "fuzz"


@FUZZ
@given(body=bodies, priority=priorities, delay_ms=delays, at_spec=deliver_ats, key=keys,
       use_basis=st.booleans())
def test_a_send_is_stored_exactly_or_refused_with_a_documented_error(
        client, body, priority, delay_ms, at_spec, key, use_basis):
    topic = _fuzz_topic(client)
    slot_basis = key if use_basis else None
    allowed = expected_errors(body, priority, delay_ms, at_spec, key, slot_basis)
    try:
        result = client.send(topic, body, priority=priority, delay_ms=delay_ms,
                             deliver_at=_deliver_at(at_spec), slot_basis=slot_basis, key=key)
    except RMQError as error:
        assert type(error) in allowed, f"{type(error).__name__}: {error}; allowed {allowed}"
        assert isinstance(error, InputError) and isinstance(error, ValueError)
        assert list(client.snapshot(topic)) == [], "a refused send wrote something"
        return
    finally:
        stored = list(client.snapshot(topic))
        client.delete_topic(topic)
    assert not allowed, f"accepted a send SPEC refuses ({allowed})"
    (row,) = stored
    assert row.body == _as_bytes(body) and row.slot == result.slot
    assert row.key == (None if key is None else _as_bytes(key))
    assert row.priority == (128 if priority is None else priority)
    assert row.state == ("ready" if delay_ms is None and at_spec is None else "delayed")


@FUZZ
@given(body=bodies.filter(lambda b: (d := _as_bytes(b)) is not None and len(d) <= LIMIT),
       key=st.one_of(st.none(), st.binary(max_size=8)), priority=st.integers(0, 255))
def test_every_storable_body_comes_back_byte_for_byte(client, body, key, priority):
    topic = _fuzz_topic(client)
    try:
        client.send(topic, body, key=key, priority=priority)
        (message,) = client.claim(topic, count=5)
        assert (message.body, message.key, message.priority) == (_as_bytes(body), key, priority)
        assert client.ack([message]) == 1
        assert list(client.snapshot(topic)) == []
    finally:
        client.delete_topic(topic)


@FUZZ
@given(items=st.lists(st.one_of(bodies, st.fixed_dictionaries(
    {"body": bodies}, optional={"priority": priorities, "delay_ms": delays, "bogus": st.just(1)})),
    min_size=1, max_size=6))
def test_a_batch_is_stored_whole_or_not_at_all(client, items):
    topic = _fuzz_topic(client)
    try:
        counts = client.send_many(topic, items)
    except InputError as error:
        assert "batch item" in str(error)
        assert list(client.snapshot(topic)) == []
    else:
        stored = list(client.snapshot(topic))
        assert counts.sent == len(items)
        assert len(stored) == counts.sent - counts.merged
    finally:
        client.delete_topic(topic)


@pytest.mark.parametrize("size, error", [(4 * 1024 * 1024, None),
                                         (4 * 1024 * 1024 + 1, MessageTooLarge)])
def test_bodies_up_to_the_default_four_mebibytes_round_trip(client, size, error):
    client.create_topic("big")
    body = bytes(range(256)) * (size // 256) + b"\x00" * (size % 256)
    if error:
        with pytest.raises(error):
            client.send("big", body)
        assert list(client.snapshot("big")) == []
        return
    client.send("big", body)
    (message,) = client.claim("big")
    assert message.body == body


def test_infinite_delay_is_an_invalid_delay(client):
    client.create_topic("t")
    with pytest.raises(InvalidDelay):
        client.send("t", b"x", delay_ms=float("inf"))
