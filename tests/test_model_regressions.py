"""Minimal reproductions of disagreements that ``test_model.py`` found between RMQ and the
model of SPEC §2-3, kept as plain tests of the rule each one broke."""

from __future__ import annotations

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]


def test_send_merging_into_a_due_delayed_message_keeps_its_earlier_due_time(client, clock):
    """SPEC §2: a merge keeps the earliest due time of the two; §3: FIFO by due time. A
    delayed message that has fallen due but was not promoted yet (no claim since) is still
    due at its own time when a ready-now duplicate merges into it."""
    client.create_topic("t", slots=1)
    due = clock() + 100
    client.send("t", b"x", delay_ms=100)
    clock.advance(1000)
    client.send("t", b"y")  # due now, 900 ms after x
    client.send("t", b"x")  # merges into x, due 900 ms ago
    assert [(m.body, m.due_at) for m in client.claim("t", count=2)] == [
        (b"x", due), (b"y", due + 900)]


def test_retry_merging_into_a_due_delayed_duplicate_keeps_its_earlier_due_time(client, clock):
    """The same through a retry: x is sent again with a delay while in flight (a new pending
    message), falls due, then the in-flight x fails and merges into it."""
    client.create_topic("t", slots=1, retry_backoff=0)
    client.send("t", b"x")
    (first,) = client.claim("t")
    due = clock() + 100
    client.send("t", b"x", delay_ms=100)
    clock.advance(1000)
    client.send("t", b"y")
    assert client.nack(first, "boom") == "retried"
    assert [(m.body, m.due_at) for m in client.claim("t", count=2)] == [
        (b"x", due), (b"y", due + 900)]


def test_raising_the_priority_of_a_low_priority_ready_message_keeps_its_place(client, clock):
    """SPEC §3: within one priority, FIFO; docs/storage.md: a merge into a ready message
    raises its priority and keeps its stamp. The stamp of a priority < 128 ready score is
    read back as (score + 2^53) - ..., which is past 2^53 and rounds an odd stamp to an even
    one: here "a", sent second, lands on the stamp of "b", sent first, and ties go to the
    member's bytes."""
    client.create_topic("t", slots=1)
    client.send("t", b"b")
    client.send("t", b"a", priority=0)  # the second stamp of this millisecond: odd
    client.send("t", b"c")
    client.send("t", b"a")  # merges, raising "a" to 128 in its place, between b and c
    assert [m.body for m in client.claim("t", count=3)] == [b"b", b"a", b"c"]


def test_due_time_of_a_low_priority_message_is_its_send_millisecond(client, clock):
    """The same rounding read the other way: the 32nd send of a millisecond at priority < 128
    has the odd stamp 31, read back as 32, so claim reports it due 1 ms after it was sent."""
    client.create_topic("t", slots=1)
    sent_at = clock()
    client.send_many("t", [f"m{i}" for i in range(31)])
    client.send("t", b"low", priority=0)
    clock.advance(1000)
    claimed = client.claim("t", count=100)
    assert {m.body: m.due_at for m in claimed}[b"low"] == sent_at


def test_release_merging_into_a_later_duplicate_keeps_its_old_place(client, clock):
    """SPEC §3 / docs/semantics.md: a released delivery goes back at its old place; SPEC §2:
    a merge keeps the earliest due time. x, claimed and released after a duplicate of it was
    sent (after y), merges into that duplicate: the merged x is due when x was, before y."""
    client.create_topic("t", slots=1)
    due = clock()
    client.send("t", b"x")
    (first,) = client.claim("t")
    clock.advance(1)
    client.send("t", b"y")
    client.send("t", b"x")  # x is in flight: a new pending x, after y
    assert client.release([first]) == 1
    assert [(m.body, m.due_at) for m in client.claim("t", count=2)] == [
        (b"x", due), (b"y", due + 1)]


def test_an_extended_delivery_is_recovered_in_the_order_of_its_own_lease(client, clock):
    """docs/semantics.md: a failed message that is pending again keeps the pending one's
    attempt count, and recover takes the longest expired lease first. x, on its second
    delivery, shares a claim's lease with y and is then extended past a later delivery of
    x (its first). Once every lease has run out, one recover must requeue the later
    delivery first (its lease ran out first): the pending x keeps attempts 1. It took x's
    second delivery in its claim's place, as its own lease expired in the same call."""
    client.create_topic("t", slots=1, visibility_timeout=3.0, retry_backoff=0, max_retries=5)
    client.send("t", b"x")
    (first,) = client.claim("t")
    assert client.nack(first, "boom") == "retried"
    client.send("t", b"y")
    extended, _ = client.claim("t", count=2)  # one share, one lease: x (attempts 2), y
    assert (extended.body, extended.attempts) == (b"x", 2)
    assert client.extend([extended], 10.0) == [True]
    client.send("t", b"x")  # pending again while in flight
    (later,) = client.claim("t")
    assert (later.body, later.attempts) == (b"x", 1)
    clock.advance(11_000)
    client.recover("t")
    rows = {(r.body, r.state): r.attempts for r in client.snapshot("t")}
    assert rows == {(b"x", "ready"): 1, (b"y", "ready"): 1}
