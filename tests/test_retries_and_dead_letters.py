"""Retries and dead letters (SPEC §3): a failed delivery retries after an exponential backoff;
a message is delivered at most 1 + max_retries times, then becomes a dead letter that can be
listed, requeued (some or all) and purged."""

from __future__ import annotations

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import rows, states

import rmq
from rmq import errors

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]


def fail_until_dead(client: rmq.Client, clock, topic: str, error: str = "boom") -> list[int]:
    """Claim and nack until the message dies; the attempts of each delivery."""
    seen = []
    while True:
        clock.advance(10**7)
        batch = client.claim(topic)
        if not batch:
            return seen
        (message,) = batch
        seen.append(message.attempts)
        client.nack(message, error)


def test_nack_retries_after_an_exponential_backoff_with_a_cap(client, clock):
    client.create_topic("t", retry_backoff=1.0, retry_backoff_max=5.0)
    client.send("t", b"job")
    waits = []
    for _ in range(5):
        (message,) = client.claim("t")
        assert client.nack(message, "boom") == "retried"
        (row,) = rows(client, "t")
        assert row.state == "delayed"
        waits.append(row.due_at - clock())
        clock.advance(row.due_at - clock() - 1)
        assert client.claim("t") == []
        clock.advance(1)
    assert waits == [1000, 2000, 4000, 5000, 5000]


def test_zero_backoff_retries_at_once(client, clock):
    client.create_topic("t", retry_backoff=0)
    client.send("t", b"job")
    client.nack(client.claim("t")[0], "boom")
    (again,) = client.claim("t")
    assert (again.body, again.attempts, again.due_at) == (b"job", 2, clock())


def test_retry_keeps_the_messages_priority(client, clock):
    client.create_topic("t", retry_backoff=0, slots=1)
    client.send("t", b"urgent", priority=250)
    client.send("t", b"normal")
    client.nack(client.claim("t", count=1)[0], "boom")
    assert [(m.body, m.priority) for m in client.claim("t", count=2)] == [
        (b"urgent", 250), (b"normal", 128)]


@pytest.mark.both_deployments
def test_one_claim_counts_attempts_in_the_slots_that_retried_and_not_in_the_others(client,
                                                                                   clock):
    # a claim reads attempt counts only where a slot has any (one check for every slot it
    # takes from): messages of the other slots, claimed in the same call, start at 1
    client.create_topic("t", retry_backoff=0, slots=8)
    retried = [b"r%d" % i for i in range(3)]
    client.send_many("t", retried)
    for message in client.claim("t", count=3):
        client.nack(message, "boom")
    clock.advance(1)
    fresh = [b"f%d" % i for i in range(40)]
    client.send_many("t", fresh)
    claimed = client.claim("t", count=50)
    assert {m.body: m.attempts for m in claimed} == {
        **{body: 2 for body in retried}, **{body: 1 for body in fresh}}
    assert len({m.slot for m in claimed}) > len({m.slot for m in claimed
                                                 if m.body in retried})
    assert client.ack(claimed) == 43


def test_each_message_of_a_claim_across_runs_of_headers_names_its_own_delivery(client,
                                                                            clock):
    # a claim's reply gives each slot's first delivery id and then the messages in runs that
    # share priority, attempts and due time: with runs of every kind interleaved across the
    # slots, every message still carries the id, body and header of its own delivery
    client.create_topic("t", retry_backoff=0, slots=8)
    client.send_many("t", [b"r%d" % i for i in range(6)])
    for message in client.claim("t", count=3):
        client.nack(message, "boom")
    for step in range(4):
        clock.advance(3)
        priority = rmq.Priority.HIGH if step % 2 else rmq.Priority.MEDIUM
        client.send_many("t", [{"body": b"p%d-%d" % (step, i), "priority": priority}
                               for i in range(7)])
    claimed = client.claim("t", count=40)
    assert len(claimed) == 34
    assert len({(m.priority, m.attempts, m.due_at) for m in claimed}) >= 5
    held = {row.id: (row.body, row.priority, row.attempts, row.due_at)
            for row in client.snapshot("t") if row.state == "in_flight"}
    assert {m.id: (m.body, m.priority, m.attempts, m.due_at) for m in claimed} == held
    assert client.ack(claimed) == 34
    assert not [row for row in client.snapshot("t") if row.state == "in_flight"]


@pytest.mark.both_deployments
def test_a_claim_reports_the_next_due_time_held_by_one_slot_of_many(client, clock):
    # the next due time is looked up only when some slot has delayed messages
    client.create_topic("t", slots=8)
    client.send("t", b"later", delay_ms=5000)
    client.send("t", b"now")
    claimed = client.claim_due("t", count=10)
    assert [m.body for m in claimed.messages] == [b"now"]
    assert claimed.next_due_at == clock() + 5000
    client.ack(claimed.messages)
    assert client.claim_due("t", count=10) == ([], clock() + 5000)
    clock.advance(5000)
    (later,) = client.claim("t", count=10)
    assert (later.body, later.attempts, later.due_at) == (b"later", 1, clock())
    assert client.claim_due("t", count=10) == ([], None)


def test_message_is_delivered_exactly_one_plus_max_retries_times(client, clock):
    client.create_topic("t", max_retries=3, retry_backoff=0.5)
    client.send("t", b"poison")
    assert fail_until_dead(client, clock, "t") == [1, 2, 3, 4]
    assert states(client, "t") == {"ready": [], "delayed": [], "in_flight": [],
                                   "dead": [b"poison"]}
    counters = client.stats("t").groups["default"].counters
    assert (counters["retried"], counters["dead"]) == (3, 1)


def test_the_default_allows_sixteen_retries(client, clock):
    client.create_topic("t", retry_backoff=0)
    client.send("t", b"poison")
    assert fail_until_dead(client, clock, "t") == list(range(1, 18))


def test_zero_max_retries_dead_letters_on_the_first_failure(client):
    client.create_topic("t", max_retries=0)
    client.send("t", b"once")
    assert client.nack(client.claim("t")[0], "nope") == "dead"


def test_dead_letter_carries_body_key_priority_attempts_last_error_and_times(client, clock):
    client.create_topic("t", max_retries=1, retry_backoff=0)
    client.send("t", b"payload", key="k-1", priority=99)
    due = clock()
    (first,) = client.claim("t")
    client.nack(first, "first error")
    clock.advance(250)
    (second,) = client.claim("t")
    assert client.nack(second, ValueError("bad price")) == "dead"
    (dead,) = client.dead_letters("t")
    assert (dead.body, dead.key, dead.priority, dead.attempts) == (b"payload", b"k-1", 99, 2)
    assert dead.error == "ValueError: bad price"
    assert (dead.topic, dead.group, dead.dead_at) == ("t", "default", clock())
    assert due <= dead.due_at <= clock()
    # the last delivery's id, and the topic's generation (an id outlives no delete)
    assert dead.id == f"{second.id}-{client.topic('t').generation}"
    assert dead.text == "payload"


@pytest.mark.both_deployments
def test_dead_letters_are_listed_oldest_death_first(client, clock):
    client.create_topic("t", max_retries=0, slots=4)
    for body in (b"one", b"two", b"three"):
        client.send("t", body)
        client.nack(client.claim("t")[0], "x")
        clock.advance(5)
    assert [d.body for d in client.dead_letters("t")] == [b"one", b"two", b"three"]


def test_requeue_some_dead_letters_by_id(client, clock):
    client.create_topic("t", max_retries=0, slots=4)
    client.send_many("t", [b"a", b"b", b"c"])
    for message in client.claim("t", count=3):
        client.nack(message, "x")
    by_body = {d.body: d.id for d in client.dead_letters("t")}
    assert client.requeue_dead("t", ids=[by_body[b"a"], by_body[b"c"]]) == 2
    assert [d.body for d in client.dead_letters("t")] == [b"b"]
    assert states(client, "t")["ready"] == [b"a", b"c"]
    assert {m.attempts for m in client.claim("t", count=3)} == {1}


@pytest.mark.both_deployments
@pytest.mark.both_clients
def test_requeue_all_dead_letters_resets_attempts(client, clock):
    client.create_topic("t", max_retries=1, retry_backoff=0, slots=4)
    client.send_many("t", [b"a", b"b"])
    for _ in range(2):
        for message in client.claim("t", count=2):
            client.nack(message, "x")
    assert len(client.dead_letters("t")) == 2
    assert client.requeue_dead("t") == 2
    assert client.dead_letters("t") == []
    taken = client.claim("t", count=5)
    assert sorted((m.body, m.attempts) for m in taken) == [(b"a", 1), (b"b", 1)]


def test_requeued_dead_letter_merges_with_a_pending_copy(client):
    client.create_topic("t", max_retries=0)
    client.send("t", b"x")
    client.nack(client.claim("t")[0], "x")
    client.send("t", b"x")
    assert client.requeue_dead("t") == 1
    assert states(client, "t")["ready"] == [b"x"]


def test_requeue_of_an_unknown_or_malformed_id(client):
    client.create_topic("t", max_retries=0, slots=4)
    assert client.requeue_dead("t", ids=["3-999"]) == 0
    with pytest.raises(errors.InvalidMessage, match="not a dead-letter id"):
        client.requeue_dead("t", ids=["nonsense"])
    with pytest.raises(errors.InvalidMessage, match="not a dead-letter id"):
        client.requeue_dead("t", ids=["4-1"])


@pytest.mark.both_deployments
@pytest.mark.both_clients
def test_purge_dead_deletes_every_dead_letter_and_nothing_else(client):
    client.create_topic("t", max_retries=0, slots=4)
    client.send_many("t", [b"a", b"b", b"keep"])
    for message in client.claim("t", count=3):
        if message.body != b"keep":
            client.nack(message, "x")
        else:
            client.release([message])
    assert client.purge_dead("t") == 2
    assert client.dead_letters("t") == []
    assert client.purge_dead("t") == 0
    assert states(client, "t")["ready"] == [b"keep"]
    assert client.stats("t").groups["default"].dead == 0


def test_dead_letters_belong_to_their_group(client):
    client.create_topic("t", max_retries=0)
    client.bind("t", "a")
    client.bind("t", "b")
    client.send("t", b"x")
    client.nack(client.claim("t", "a")[0], "x")
    assert [d.body for d in client.dead_letters("t", "a")] == [b"x"]
    assert client.dead_letters("t", "b") == []
    assert client.purge_dead("t", "b") == 0
    assert [m.body for m in client.claim("t", "b")] == [b"x"]


def test_failure_of_a_message_resent_while_in_flight_keeps_the_new_sends_attempts(client):
    client.create_topic("t", retry_backoff=0)
    client.send("t", b"x")
    (first,) = client.claim("t")
    client.send("t", b"x")
    assert client.nack(first, "boom") == "retried"
    (row,) = rows(client, "t")
    assert (row.state, row.attempts) == ("ready", 0)
    (again,) = client.claim("t")
    assert again.attempts == 1


def test_altered_max_retries_applies_to_the_next_failure(client):
    client.create_topic("t", max_retries=5, retry_backoff=0)
    client.send("t", b"x")
    client.nack(client.claim("t")[0], "x")
    client.alter_topic("t", max_retries=1)
    assert client.nack(client.claim("t")[0], "x") == "dead"
