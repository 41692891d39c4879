"""Delayed and fixed-time delivery (SPEC §2), driven by a controllable clock: a message is
invisible until its due time and claimable from that millisecond on."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import rows

import rmq
from rmq import errors

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]


def test_delayed_message_is_claimable_from_its_due_millisecond(client, clock):
    client.create_topic("t")
    sent_at = clock()
    client.send("t", b"later", delay_ms=2500)
    assert client.claim("t") == []
    clock.advance(2499)
    assert client.claim("t") == []
    clock.advance(1)
    (message,) = client.claim("t")
    assert (message.body, message.due_at) == (b"later", sent_at + 2500)


def test_snapshot_shows_a_delayed_message_with_its_due_time(client, clock):
    client.create_topic("t")
    client.send("t", b"x", delay_ms=750, priority=7)
    (row,) = rows(client, "t")
    assert (row.state, row.due_at, row.priority, row.attempts) == ("delayed", clock() + 750, 7, 0)


def test_deliver_at_epoch_milliseconds(client, clock):
    client.create_topic("t")
    at = clock() + 60_000
    client.send("t", b"at-ms", deliver_at=at)
    clock.advance(59_999)
    assert client.claim("t") == []
    clock.advance(1)
    (message,) = client.claim("t")
    assert message.due_at == at


def test_deliver_at_aware_datetime_in_any_timezone(client, clock):
    client.create_topic("t")
    due_ms = clock() + 90_000
    local = datetime.fromtimestamp(due_ms / 1000, tz=UTC).astimezone(
        timezone(timedelta(hours=5, minutes=30)))
    client.send("t", b"at-datetime", deliver_at=local)
    (row,) = rows(client, "t")
    assert (row.state, row.due_at) == ("delayed", due_ms)


def test_priority_combines_with_a_delay(client, clock):
    client.create_topic("t", slots=1)
    client.send("t", b"ready-low", priority=rmq.Priority.LOW)
    client.send("t", b"delayed-high", priority=rmq.Priority.HIGH, delay_ms=100)
    assert [m.body for m in client.claim("t", count=5)] == [b"ready-low"]
    clock.advance(100)
    (message,) = client.claim("t")
    assert (message.body, message.priority) == (b"delayed-high", rmq.Priority.HIGH)


def test_priority_combines_with_a_fixed_time(client, clock):
    client.create_topic("t", slots=1)
    client.send("t", b"a", deliver_at=clock() + 10, priority=5)
    client.send("t", b"b", deliver_at=clock() + 10, priority=250)
    clock.advance(10)
    assert [m.body for m in client.claim("t", count=2)] == [b"b", b"a"]


def test_delayed_messages_become_due_in_due_time_order(client, clock):
    client.create_topic("t", slots=1)
    for body, delay in ((b"third", 300), (b"first", 100), (b"second", 200)):
        client.send("t", body, delay_ms=delay)
    clock.advance(1000)
    assert [m.body for m in client.claim("t", count=3)] == [b"first", b"second", b"third"]


@pytest.mark.both_deployments
def test_claim_due_reports_when_the_next_delayed_message_is_due(client, clock):
    client.create_topic("t", slots=4)
    client.send("t", b"soon", delay_ms=400)
    client.send("t", b"later", delay_ms=900)
    messages, next_due = client.claim_due("t")
    assert (messages, next_due) == ([], clock() + 400)
    clock.advance(400)
    messages, next_due = client.claim_due("t")
    assert [m.body for m in messages] == [b"soon"]
    assert next_due == clock() + 500


def test_claim_due_reports_no_due_time_when_nothing_is_delayed(client):
    client.create_topic("t")
    assert client.claim_due("t") == ([], None)


def test_delay_up_to_max_delay_is_accepted(client, clock):
    client.create_topic("t", max_delay=10)
    client.send("t", b"edge", delay_ms=10_000)
    client.send("t", b"edge-at", deliver_at=clock() + 10_000)
    assert {r.due_at for r in rows(client, "t")} == {clock() + 10_000}


def test_fractional_delay_is_at_least_one_millisecond(client, clock):
    client.create_topic("t")
    client.send("t", b"tiny", delay_ms=0.4)
    assert client.claim("t") == []
    clock.advance(1)
    assert [m.body for m in client.claim("t")] == [b"tiny"]


@pytest.mark.both_deployments
@pytest.mark.both_clients
def test_claim_with_wait_returns_when_a_delayed_message_falls_due(make_client):
    c = make_client()
    c.create_topic("t")
    before = c.clock()
    c.send("t", b"soon", delay_ms=150)
    (message,) = c.claim("t", wait=5.0)
    claimed_at = c.clock()
    assert message.body == b"soon"
    assert before + 150 <= message.due_at <= claimed_at < message.due_at + 2000


def test_delay_and_deliver_at_together_are_refused(client, clock):
    client.create_topic("t")
    with pytest.raises(errors.ConflictingOptions, match="delay_ms and deliver_at"):
        client.send("t", b"x", delay_ms=10, deliver_at=clock() + 10)
    assert rows(client, "t") == []
