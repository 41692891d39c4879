"""Deliveries of a deleted topic settle nothing of a topic created again under its name.

The new topic hands out delivery ids from the same numbers, so an old consumer's ``ack``,
``nack``, ``release`` or ``extend`` names the new topic's in-flight messages; the scripts
check the generation each delivery was claimed under and change nothing
(docs/reliability.md, "Deleted topics"). ``recover`` from a client whose cache holds the
old topic reloads it and recovers with the new topic's settings."""

from __future__ import annotations

import dataclasses
import threading

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import rows, states, wait_for

import rmq
from rmq import errors
from rmq.runtime.holdings import Holdings

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]

CACHED = 3600.0  # a registry cache that would hold the deleted entry for the whole test
BODIES = [b"a", b"b", b"c", b"d", b"e", b"f"]  # over several of the topic's 4 slots


def recreated(make_client, clock, **settings):
    """A consumer (``old``) holding deliveries of topic "t", which ``admin`` deletes,
    creates again, fills with the same bodies and claims: the same delivery ids, in
    flight for ``admin``. Returns old, admin, the stale and the fresh deliveries."""
    old = make_client(clock=clock, registry_ttl=CACHED)
    admin = make_client(clock=clock)
    admin.create_topic("t", slots=4, **settings)
    admin.send_many("t", BODIES)
    stale = old.claim("t", count=10)
    admin.delete_topic("t")
    admin.create_topic("t", slots=4, **settings)
    admin.send_many("t", BODIES)
    fresh = admin.claim("t", count=10)
    assert sorted(m.id for m in stale) == sorted(m.id for m in fresh)  # the collision
    assert {m.generation for m in stale}.isdisjoint({m.generation for m in fresh})
    assert len(stale) == len(BODIES) > len({m.slot for m in stale}) > 1
    return old, admin, stale, fresh


def in_flight(admin) -> dict[str, int]:
    """The new topic's in-flight deliveries: id -> lease expiry."""
    return {r.id: r.lease_until for r in rows(admin, "t") if r.state == "in_flight"}


def test_a_claimed_delivery_carries_its_topics_generation(client):
    client.create_topic("t", slots=2)
    client.send("t", b"x")
    (message,) = client.claim("t")
    assert message.generation == client.topic("t", fresh=True).generation != ""


def test_acking_a_deleted_topics_deliveries_acknowledges_none_of_its_successors(
        make_client, clock):
    old, admin, stale, fresh = recreated(make_client, clock)
    held = in_flight(admin)

    assert old.ack(stale) == 0
    assert old.ack(stale[0]) == 0

    assert in_flight(admin) == held
    assert admin.stats("t").groups["default"].counters["acked"] == 0
    assert admin.ack(fresh) == len(fresh)


def test_an_ack_of_old_and_new_deliveries_together_counts_only_the_new(make_client, clock):
    _, admin, stale, fresh = recreated(make_client, clock)
    assert admin.ack([*stale, *fresh[:2]]) == 2
    assert len(in_flight(admin)) == len(fresh) - 2


def test_nacking_a_deleted_topics_delivery_fails_none_of_its_successors(make_client, clock):
    old, admin, stale, _ = recreated(make_client, clock, max_retries=0)
    held = in_flight(admin)

    assert [old.nack(m, "boom") for m in stale] == [None] * len(stale)

    assert in_flight(admin) == held
    assert admin.dead_letters("t", "default") == []
    assert states(admin, "t")["ready"] == []


def test_nacking_a_delivery_of_a_deleted_topic_that_is_not_created_again_is_a_no_op(
        make_client, clock):
    consumer = make_client(clock=clock)
    consumer.create_topic("t", slots=2)
    consumer.send("t", b"x")
    (message,) = consumer.claim("t")
    consumer.delete_topic("t")
    assert consumer.nack(message, "boom") is None


def test_releasing_a_deleted_topics_deliveries_gives_back_none_of_its_successors(
        make_client, clock):
    old, admin, stale, _ = recreated(make_client, clock)
    held = in_flight(admin)

    assert old.release(stale) == 0

    assert in_flight(admin) == held
    assert admin.claim("t", count=10) == []


def test_extending_a_deleted_topics_deliveries_extends_none_of_its_successors(
        make_client, clock):
    old, admin, stale, fresh = recreated(make_client, clock)
    held = in_flight(admin)

    assert old.extend(stale, 600) == [False] * len(stale)
    assert in_flight(admin) == held

    assert admin.extend(fresh, 600) == [True] * len(fresh)
    assert set(in_flight(admin).values()) == {clock() + 600_000}


@pytest.mark.both_clients
def test_recover_from_a_cache_of_the_deleted_topic_uses_the_new_topics_settings(
        make_client, clock):
    """The old client's cache says max_retries 0 (dead-letter at once); the topic created
    again says 3: its expired deliveries are retried, not dead-lettered."""
    old = make_client(clock=clock, registry_ttl=CACHED)
    admin = make_client(clock=clock)
    admin.create_topic("t", slots=4, max_retries=0)
    old.send_many("t", BODIES)  # caches the entry
    stale = old.claim("t", count=10, lease=1.0)
    admin.delete_topic("t")
    admin.create_topic("t", slots=4, max_retries=3, retry_backoff=0)
    admin.send_many("t", BODIES)
    fresh = admin.claim("t", count=10, lease=1.0)
    assert sorted(m.id for m in stale) == sorted(m.id for m in fresh)
    clock.advance(1001)

    assert old.recover("t") == len(fresh)

    assert admin.dead_letters("t", "default") == []
    assert states(admin, "t")["ready"] == sorted(BODIES)
    assert {m.attempts for m in admin.claim("t", count=10)} == {2}
    assert old.topic("t").settings.max_retries == 3


@pytest.mark.both_clients
def test_requeue_dead_from_a_cache_of_the_deleted_topic_reaches_the_new_topic(
        make_client, clock):
    """The old client's cache says 2 slots; the topic created again has 8, whose dead
    letters in slots 2-7 a requeue with the old slot count would miss."""
    old = make_client(clock=clock, registry_ttl=CACHED)
    admin = make_client(clock=clock)
    admin.create_topic("t", slots=2)
    old.send("t", b"cached")
    admin.delete_topic("t")
    admin.create_topic("t", slots=8, max_retries=0)
    admin.send_many("t", BODIES)
    for message in admin.claim("t", count=10):
        assert admin.nack(message, "boom") == "dead"
    assert max(int(d.id.split("-")[0]) for d in admin.dead_letters("t", "default")) >= 2

    assert old.requeue_dead("t", "default") == len(BODIES)
    assert states(admin, "t")["ready"] == sorted(BODIES)


def test_a_hand_made_delivery_with_a_generation_that_is_no_str_is_refused(client):
    client.create_topic("t")
    message = rmq.Message("t", "default", 0, 1, b"x", 128, 1, 0, generation=7)  # type: ignore
    with pytest.raises(errors.InvalidArgument, match="generation must be a str"):
        client.ack(message)


def test_a_consumer_finishing_a_deleted_topics_message_loses_none_of_the_new_topics(
        make_client):
    """The worker runtime's ack of a message its topic's deletion took acknowledges nothing
    of the topic created again, and the consumer goes on with that topic."""
    client, admin = make_client(kind="sync"), make_client(kind="sync")
    client.create_topic("t", slots=1)
    gate = threading.Event()
    seen: list[rmq.Message] = []

    def handler(message: rmq.Message) -> None:
        seen.append(message)
        if message.body == b"old":
            assert gate.wait(10), "the test never opened the gate"

    consumer = rmq.Consumer(client, "t", handler, concurrency=1, heartbeat_interval=60)
    consumer.start()
    try:
        admin.send("t", b"old")
        wait_for(lambda: [m.body for m in seen] == [b"old"], what="the old message started")
        admin.delete_topic("t")
        admin.create_topic("t", slots=1)
        admin.send("t", b"new")
        (new,) = admin.claim("t")
        # ids never repeat (docs/storage.md, "Delivery ids"); the generation tells the two
        # deliveries apart as well
        assert new.id != seen[0].id and new.generation != seen[0].generation

        gate.set()
        wait_for(lambda: consumer.handled == 1, what="the old message settled")
        assert [r.id for r in rows(admin, "t") if r.state == "in_flight"] == [new.id]
        assert admin.ack(new) == 1

        admin.send("t", b"later")
        wait_for(lambda: consumer.handled == 2, what="the new topic consumed")
        assert [m.body for m in seen] == [b"old", b"later"]
    finally:
        gate.set()
        consumer.stop(grace=1)


def test_a_consumer_holds_deliveries_of_two_generations_under_one_id_apart():
    """A consumer may hold a deleted topic's delivery while it claims the topic created
    again: settling the old one must not forget the new one of the same slot and id (its
    lease would go unextended, and no worker would start it)."""
    old = rmq.Message("t", "default", 0, 1, b"old", 128, 1, 0, None, 30_000, "a" * 16)
    new = dataclasses.replace(old, body=b"new", generation="b" * 16)
    holdings = Holdings()
    holdings.add([old, new], now=0)
    assert len(holdings) == 2
    holdings.forget([old])
    assert holdings.all() == [new]
    assert holdings.holds(new) and not holdings.holds(old)
    assert holdings.start_by(new) == 20_000
