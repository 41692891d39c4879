"""One topic's corrupt registry entry (settings another program wrote, or damaged) is
reported for that topic, naming it, and stops nobody else: operations over every topic skip
it, and the topic can still be deleted."""

from __future__ import annotations

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401

from rmq.errors import CorruptRegistry
from rmq.storage.keys import TOPICS, RegistryKeys

pytestmark = pytest.mark.sync_client

CORRUPTIONS = {
    "not JSON": ("settings", b"{not json"),
    "not an object": ("settings", b"[1, 2]"),
    "an unknown setting": ("settings", b'{"slots": 8, "colour": "blue"}'),
    "a setting out of range": ("settings", b'{"slots": 3}'),
    "a bound group that is no name": ("groups", b"bad:group{"),
    "limits that are not RMQ's": ("limits", b'{"max_in_flight": 0, "rate": null}'),
    "limits of a group that is no name": ("limits", b"bad:group{"),
}


def _corrupt(client, topic: str, how: str) -> None:
    what, value = CORRUPTIONS[how]
    keys = RegistryKeys(topic)
    if what == "settings":
        client.redis.set(keys.settings, value)
    elif what == "limits":
        group = "default" if value.startswith(b"{") else value
        stored = value if value.startswith(b"{") else b'{"max_in_flight": 1, "rate": null}'
        client.redis.hset(keys.limits, group, stored)
    else:
        client.redis.sadd(keys.groups, value)
    client.redis.sadd(TOPICS, topic)


@pytest.mark.parametrize("how", sorted(CORRUPTIONS))
def test_a_corrupt_topic_is_reported_by_name_and_skipped_by_recovery_of_all(client, clock,
                                                                             how):
    client.create_topic("good", retry_backoff=0)
    client.create_topic("broken")
    _corrupt(client, "broken", how)
    client.send("good", b"work")
    client.claim("good", lease=1)
    clock.advance(2000)
    assert client.recover() == 1  # the good topic's expired lease, whatever "broken" holds
    for call in (lambda: client.topic("broken", fresh=True), lambda: client.send("broken", b"x"),
                 lambda: client.claim("broken"), lambda: client.stats("broken"),
                 lambda: client.recover("broken")):
        with pytest.raises(CorruptRegistry, match="topic 'broken' has a corrupt registry"):
            call()
    assert client.topics() == ["broken", "good"]


def test_a_corrupt_topic_can_be_deleted_with_everything_it_held(client):
    client.create_topic("broken", slots=16)
    client.bind("broken", "workers")
    client.send_many("broken", [b"%d" % i for i in range(50)])
    client.redis.set(RegistryKeys("broken").settings, b"garbage")
    client.delete_topic("broken")
    assert client.topics() == []
    assert client.redis.keys("rmq:{broken*") == []


def test_a_name_in_the_topic_list_that_is_no_topic_name_is_not_listed(client):
    client.create_topic("good")
    client.redis.sadd(TOPICS, b"not a name", b"\xff\xfe")
    assert client.topics() == ["good"]
    assert client.recover() == 0


@pytest.mark.both_clients
def test_an_unreadable_heartbeat_hides_no_other_consumer(client):
    from rmq.storage.registry import ConsumerState

    client.create_topic("jobs")
    client.heartbeat(ConsumerState("c1", "jobs", "default", "host", 1, client.now(), 1, 0, 0,
                                   0))
    client.redis.hset(RegistryKeys("jobs").consumers, "c2", b"{garbage")
    assert [c.id for c in client.consumers("jobs")] == ["c1"]


def test_a_delivery_of_a_topic_whose_entry_breaks_is_still_acknowledged(make_client):
    client = make_client(registry_ttl=0)
    client.create_topic("broken")
    client.send("broken", b"work")
    (message,) = client.claim("broken")
    _corrupt(client, "broken", "not JSON")
    assert client.ack(message) == 1
