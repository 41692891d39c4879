"""Deleted topics (issue 12, point 3): once ``delete_topic`` returns, no client stores into
the topic or claims from it, whatever its registry cache holds; a topic created again starts
empty, and clients that cached the old one use the new one. See docs/storage.md, "Deleted
topics"."""

from __future__ import annotations

import threading

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import rows

from rmq import errors
from rmq.client.outgoing import prepare
from rmq.storage import queue
from rmq.storage.generation import TopicGone, check_stored
from rmq.storage.keys import RegistryKeys, SlotKeys
from rmq.storage.registry import ConsumerState

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]

CACHED = 3600.0  # a registry cache that would hold the deleted entry for the whole test


def topic_keys(client, topic: str) -> list[bytes]:
    return sorted(client.redis.scan_iter(match=f"rmq:{{{topic}*"))


@pytest.mark.both_clients
def test_sends_and_claims_from_a_stale_cache_fail_at_once_and_store_nothing(make_client):
    admin, other = make_client(), make_client(registry_ttl=CACHED)
    admin.create_topic("t", slots=4)
    other.send("t", b"before")  # caches the entry
    held = other.claim("t", count=1)
    assert [m.body for m in held] == [b"before"]

    admin.delete_topic("t")

    assert other.extend(held, 30) == [False]
    assert other.ack(held) == 0

    with pytest.raises(errors.UnknownTopic):
        other.send("t", b"after")
    with pytest.raises(errors.UnknownTopic):
        other.send_many("t", [b"a", b"b", b"c"])
    with pytest.raises(errors.UnknownTopic):
        other.claim("t")
    assert topic_keys(admin, "t") == []
    admin.create_topic("t", slots=4)
    assert rows(admin, "t") == []


@pytest.mark.both_clients
def test_a_topic_created_again_is_used_by_clients_that_cached_the_old_one(make_client):
    admin, other = make_client(), make_client(registry_ttl=CACHED)
    admin.create_topic("t", slots=2)
    other.send("t", b"old")
    admin.delete_topic("t")
    admin.create_topic("t", slots=16, max_retries=1)

    other.send("t", b"new")  # refused under the old generation, then sent to the new topic
    assert other.send_many("t", [b"x", b"y"]).sent == 2
    assert sorted(r.body for r in rows(admin, "t")) == [b"new", b"x", b"y"]
    assert {r.slot for r in rows(admin, "t")} <= set(range(16))
    claimed = other.claim("t", count=10)
    assert sorted(m.body for m in claimed) == [b"new", b"x", b"y"]
    assert other.topic("t").settings.slots == 16


@pytest.mark.both_deployments
def test_no_send_lands_after_delete_topic_returns(make_client):
    """The issue's race: a client sending in a loop while another deletes the topic. Every
    send that starts after delete_topic returned fails, and the topic holds nothing."""
    admin, sender = make_client(), make_client(kind="sync", registry_ttl=CACHED)
    admin.create_topic("t", slots=8)
    deleted = threading.Event()
    late_successes: list[int] = []
    refused_after = 0
    started = threading.Event()

    def send_in_a_loop() -> None:
        nonlocal refused_after
        i = 0
        while refused_after < 50:
            after_delete = deleted.is_set()
            i += 1
            try:
                sender.send("t", f"m{i}".encode())
            except errors.UnknownTopic:
                if after_delete:
                    refused_after += 1
                continue
            started.set()
            if after_delete:
                late_successes.append(i)

    thread = threading.Thread(target=send_in_a_loop)
    thread.start()
    assert started.wait(10)
    admin.delete_topic("t")
    deleted.set()
    thread.join(30)
    assert not thread.is_alive()

    assert late_successes == []
    assert topic_keys(admin, "t") == []


@pytest.mark.both_deployments
@pytest.mark.both_clients
def test_a_group_commit_stores_the_live_topics_and_refuses_only_the_deleted_one(make_client):
    client = make_client(kind="sync", registry_ttl=CACHED)
    client.create_topic("gone")
    client.create_topic("live")
    gone, live = client.topic("gone"), client.topic("live")
    client.delete_topic("gone")
    now = client.now()
    sends = [next(queue.send(info.name, info.generation, info.groups,
                             [prepare(info.settings, now, body)], now, client._heads(info)))
             for info, body in ((gone, b"lost"), (live, b"kept"))]

    lost, kept = client._run(queue.join(sends))

    with pytest.raises(TopicGone) as refused:
        check_stored("gone", lost[0])
    assert not refused.value.stale
    assert kept == [[0]]  # stored, not merged
    assert [r.body for r in rows(client, "live")] == [b"kept"]
    assert topic_keys(client, "gone") == []


@pytest.mark.both_deployments
def test_creating_a_topic_writes_one_generation_into_the_registry_and_every_slot(client):
    client.create_topic("t", slots=4)
    generation = client.topic("t", fresh=True).generation
    assert generation and generation.isalnum()
    stored = [client.redis.get(SlotKeys("t", s).generation) for s in range(4)]
    assert stored == [generation.encode()] * 4
    assert client.create_topic("t", slots=4) and client.topic("t", fresh=True).generation \
        == generation  # the same settings again: nothing rewritten
    with pytest.raises(errors.TopicConflict):
        client.create_topic("t", slots=2)
    assert client.redis.get(RegistryKeys("t").generation) == generation.encode()
    assert client.redis.get(SlotKeys("t", 4).generation) is None


def test_a_topic_created_before_generations_existed_still_works_unchecked(client):
    client.create_topic("t", slots=2)
    client.redis.delete(RegistryKeys("t").generation,
                        *(SlotKeys("t", s).generation for s in range(2)))
    assert client.topic("t", fresh=True).generation == ""
    client.send("t", b"x")
    assert [m.body for m in client.claim("t")] == [b"x"]


def test_a_generation_that_is_not_rmqs_makes_the_entry_corrupt(client):
    client.create_topic("t")
    client.redis.set(RegistryKeys("t").generation, "not one!")
    with pytest.raises(errors.CorruptRegistry, match="generation"):
        client.topic("t", fresh=True)
    client.delete_topic("t")  # a corrupt entry can still be deleted
    assert topic_keys(client, "t") == []


def test_heartbeats_of_a_consumer_that_outlives_its_topic_write_nothing(make_client):
    # A Consumer keeps running through a delete (it claims again once the topic is created
    # anew) and keeps sending heartbeats: they must not leave a consumers hash behind.
    admin = make_client()
    admin.create_topic("t", slots=2)
    state = ConsumerState("c1", "t", "default", "host", 1, admin.now(), 1, 0, 0, 0)
    admin.heartbeat(state)
    assert [c.id for c in admin.consumers("t")] == ["c1"]

    admin.delete_topic("t")
    admin.heartbeat(state)
    assert topic_keys(admin, "t") == []

    admin.create_topic("t", slots=2)
    admin.heartbeat(state)  # the topic exists again: the consumer is listed again
    assert [c.id for c in admin.consumers("t")] == ["c1"]


def dead_letter_of(client, topic: str, body: bytes):
    client.send(topic, body)
    (message,) = client.claim(topic)
    assert client.nack(message, "boom") == "dead"
    (letter,) = [d for d in client.dead_letters(topic) if d.body == body]
    return letter


@pytest.mark.parametrize("stale_cache", [False, True])
def test_dead_letter_ids_of_a_deleted_topic_requeue_nothing_of_the_new_one(make_client,
                                                                             stale_cache,
                                                                             clock):
    """A topic created again numbers its deliveries anew, from the clock's floor
    (docs/storage.md, "Delivery ids"): in one frozen millisecond its ids are the old
    topic's, and an id listed before the delete names no dead letter of the new topic, by
    this client or by one whose cache still holds the old entry."""
    admin = make_client(clock=clock)
    other = make_client(registry_ttl=CACHED, clock=clock) if stale_cache else admin
    admin.create_topic("t", slots=1, max_retries=0)
    old = dead_letter_of(other, "t", b"old")
    admin.delete_topic("t")
    admin.create_topic("t", slots=1, max_retries=0)
    new = dead_letter_of(admin, "t", b"new")
    assert new.id.rsplit("-", 1)[0] == old.id.rsplit("-", 1)[0]  # the same slot-seq

    assert other.requeue_dead("t", ids=[old.id]) == 0  # ignored, as an unknown id
    assert [d.body for d in admin.dead_letters("t")] == [b"new"]
    assert [r.state for r in rows(admin, "t")] == ["dead"]
    assert other.requeue_dead("t", ids=[old.id, new.id]) == 1
    assert admin.dead_letters("t") == []


def test_a_dead_letter_id_names_its_topics_generation(client):
    client.create_topic("t", slots=2, max_retries=0)
    letter = dead_letter_of(client, "t", b"x")
    generation = client.topic("t").generation
    slot, seq, of = letter.id.split("-")
    assert of == generation and slot.isdigit() and seq.isdigit()
    (row,) = client.peek("t", "dead").rows
    assert row.id == letter.id  # what the console lists, and requeues with
    assert client.requeue_dead("t", ids=[f"{slot}-{seq}"]) == 1  # an id without one: as now


def test_dead_letters_of_a_topic_created_before_generations_have_ids_without_one(client):
    client.create_topic("t", slots=2, max_retries=0)
    client.redis.delete(RegistryKeys("t").generation,
                        *(SlotKeys("t", s).generation for s in range(2)))
    client.topic("t", fresh=True)
    letter = dead_letter_of(client, "t", b"x")
    assert letter.id.count("-") == 1
    assert client.requeue_dead("t", ids=[letter.id]) == 1
