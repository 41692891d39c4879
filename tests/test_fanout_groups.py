"""Groups (SPEC §1): every bound group receives every message; within a group each message goes
to one consumer; with no group bound a topic has the group ``default``."""

from __future__ import annotations

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import drain, states, wait_for

import rmq

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]


def test_an_unbound_topic_delivers_to_the_default_group(client):
    client.create_topic("t")
    client.send("t", b"x")
    assert client.topic("t").groups == ("default",)
    assert [m.group for m in client.claim("t")] == ["default"]


def test_every_bound_group_receives_every_message(client):
    client.create_topic("t", slots=4)
    for group in ("images", "search", "audit"):
        assert client.bind("t", group)
    client.send_many("t", [b"a", b"b", b"c"])
    for group in ("images", "search", "audit"):
        assert sorted(m.body for m in drain(client, "t", group)) == [b"a", b"b", b"c"]
    assert client.claim("t", "default") == []


def test_binding_twice_is_harmless(client):
    client.create_topic("t")
    assert client.bind("t", "g") is True
    assert client.bind("t", "g") is False
    assert client.topic("t").groups == ("g",)


def test_within_a_group_each_message_goes_to_one_consumer(client, make_client, clock):
    client.create_topic("t", slots=4)
    other = make_client(clock=clock)
    client.send_many("t", [f"m{i}" for i in range(10)])
    mine = client.claim("t", count=4)
    theirs = other.claim("t", count=100)
    assert len(mine) == 4 and len(theirs) == 6
    assert not {m.body for m in mine} & {m.body for m in theirs}


def test_acknowledging_in_one_group_leaves_the_others_copy(client):
    client.create_topic("t")
    client.bind("t", "a")
    client.bind("t", "b")
    client.send("t", b"x")
    client.ack(client.claim("t", "a"))
    assert states(client, "t", "a")["ready"] == []
    assert states(client, "t", "b")["ready"] == [b"x"]


def test_merging_is_decided_per_group(client):
    client.create_topic("t")
    client.bind("t", "a")
    client.bind("t", "b")
    client.send("t", b"x")
    client.claim("t", "a")  # in flight in a, still pending in b
    result = client.send("t", b"x")
    assert result.merged is False  # something new was stored (in a)
    stats = client.stats("t").groups
    assert (stats["a"].counters["merged"], stats["b"].counters["merged"]) == (0, 1)
    assert (stats["a"].ready, stats["b"].ready) == (1, 1)
    assert client.send("t", b"x").merged is True


def test_a_group_bound_later_receives_only_later_messages(client):
    client.create_topic("t")
    client.bind("t", "early")
    client.send("t", b"before")
    client.bind("t", "late")
    client.send("t", b"after")
    assert sorted(m.body for m in drain(client, "t", "early")) == [b"after", b"before"]
    assert [m.body for m in drain(client, "t", "late")] == [b"after"]


@pytest.mark.both_clients
def test_binding_a_group_is_seen_by_other_clients_within_their_registry_ttl(make_client, clock):
    producer = make_client(clock=clock, registry_ttl=0)
    admin = make_client(clock=clock)
    admin.create_topic("t")
    producer.send("t", b"to-default")
    admin.bind("t", "g")
    producer.send("t", b"to-g")
    assert [m.body for m in admin.claim("t", "g")] == [b"to-g"]


def test_unbind_stops_new_deliveries_but_keeps_what_the_group_holds(client):
    client.create_topic("t")
    client.bind("t", "a")
    client.bind("t", "b")
    client.send("t", b"held")
    assert client.unbind("t", "b") is True
    client.send("t", b"new")
    assert states(client, "t", "b")["ready"] == [b"held"]
    assert states(client, "t", "a")["ready"] == [b"held", b"new"]


def test_an_unbound_groups_messages_stay_visible_and_recoverable(client, clock):
    client.create_topic("t", visibility_timeout=1, retry_backoff=0)
    client.bind("t", "a")
    client.bind("t", "old")
    client.send_many("t", [b"held", b"pending"])
    assert len(client.claim("t", "old", count=1)) == 1
    client.unbind("t", "old")
    old = client.stats("t").groups["old"]
    assert (old.ready, old.in_flight) == (1, 1)
    clock.advance(1000)
    assert client.recover("t") == 1
    assert states(client, "t", "old")["ready"] == [b"held", b"pending"]
    client.bind("t", "old")
    assert client.topic("t", fresh=True).unbound_groups == ()


def test_consumers_of_two_groups_each_handle_every_message(make_client):
    producer = make_client()
    producer.create_topic("t", slots=2)
    seen: dict[str, list[bytes]] = {"x": [], "y": []}
    consumers = [rmq.Consumer(make_client(kind="sync"), "t", lambda m: seen[m.group].append(m.body),
                              group=g, heartbeat_interval=60).start() for g in ("x", "y")]
    try:
        producer.topic("t", fresh=True)
        producer.send_many("t", [b"1", b"2", b"3"])
        wait_for(lambda: len(seen["x"]) == len(seen["y"]) == 3, what="both groups served")
    finally:
        for consumer in consumers:
            consumer.stop(grace=1)
    assert sorted(seen["x"]) == sorted(seen["y"]) == [b"1", b"2", b"3"]
