"""Tags, properties and server-side filters (SPEC §13): a group stores only what its filters
accept, counts the rest as ``filtered``, and a send carrying a tag or properties merges only
with an equal one."""

from __future__ import annotations

import threading

import numpy
import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import drain, rows, states

import rmq
from rmq.storage.keys import RegistryKeys

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]


def bodies(client, topic, group):
    return sorted(m.body for m in drain(client, topic, group))


def test_a_group_stores_only_the_messages_its_where_accepts(client):
    client.create_topic("t", slots=4)
    client.bind("t", "all")
    client.bind("t", "eu", where="region = 'eu' AND price > 10")
    client.send("t", b"cheap", properties={"region": "eu", "price": 5})
    client.send("t", b"dear", properties={"region": "eu", "price": 50})
    client.send("t", b"us", properties={"region": "us", "price": 50})
    client.send("t", b"bare")
    assert bodies(client, "t", "eu") == [b"dear"]
    assert bodies(client, "t", "all") == [b"bare", b"cheap", b"dear", b"us"]
    counters = client.stats("t").groups["eu"].counters
    assert (counters["sent"], counters["filtered"]) == (1, 3)
    assert client.stats("t").groups["all"].counters["filtered"] == 0


@pytest.mark.both_deployments
def test_a_batch_is_filtered_message_by_message(client):
    client.create_topic("t", slots=4)
    client.bind("t", "odd", where="n IN (1, 3, 5, 7, 9)")
    client.bind("t", "tagged", tags="a || b")
    client.send_many("t", [{"body": f"m{n}", "properties": {"n": n}, "tag": "abc"[n % 3]}
                           for n in range(10)])
    assert bodies(client, "t", "odd") == [b"m1", b"m3", b"m5", b"m7", b"m9"]
    assert bodies(client, "t", "tagged") == [b"m0", b"m1", b"m3", b"m4", b"m6", b"m7", b"m9"]
    assert client.stats("t").groups["odd"].counters["filtered"] == 5
    assert client.stats("t").groups["tagged"].counters["filtered"] == 3


def test_a_message_is_delivered_with_its_tag_and_properties(client):
    client.create_topic("t")
    client.send("t", b"x", key="k", tag="red", properties={"a": 1, "b": 2.5, "c": True,
                                                          "d": "é"})
    (message,) = client.claim("t")
    assert (message.body, message.key, message.tag) == (b"x", b"k", "red")
    assert message.properties == {"a": 1, "b": 2.5, "c": True, "d": "é"}
    client.send("t", b"plain")
    (plain,) = client.claim("t")
    assert (plain.tag, plain.properties) == (None, {})


def test_a_dead_letter_and_the_snapshot_show_tag_and_properties(client):
    client.create_topic("t", max_retries=0)
    client.send("t", b"x", tag="red", properties={"a": 1})
    client.send("t", b"y", tag="blue", properties={"b": "z"})
    client.nack(client.claim("t", count=1)[0], "boom")
    (dead,) = client.dead_letters("t")
    assert (dead.tag, dead.properties) == ("red", {"a": 1})
    snapshot = {r.body: (r.state, r.tag, r.properties) for r in rows(client, "t")}
    assert snapshot == {b"x": ("dead", "red", {"a": 1}), b"y": ("ready", "blue", {"b": "z"})}
    found = client.find_messages("t", body=b"y")
    assert [(r.state, r.tag) for r in found] == [("ready", "blue")]


def test_sends_merge_only_with_equal_tag_and_properties(client):
    client.create_topic("t")
    assert not client.send("t", b"x", tag="a", properties={"p": 1, "q": "s"}).merged
    assert client.send("t", b"x", tag="a", properties={"q": "s", "p": 1}).merged
    assert not client.send("t", b"x", tag="b", properties={"p": 1, "q": "s"}).merged
    assert not client.send("t", b"x", tag="a", properties={"p": 2, "q": "s"}).merged
    assert not client.send("t", b"x", tag="a", properties={"p": 1.0, "q": "s"}).merged
    assert not client.send("t", b"x").merged
    assert client.send_many("t", [b"x", {"body": b"x", "tag": "a",
                                         "properties": {"p": 1, "q": "s"}}]).merged == 2
    assert len(states(client, "t")["ready"]) == 5


def test_a_message_every_group_rejects_is_not_reported_merged(client):
    client.create_topic("t")
    client.bind("t", "g", where="x = 1")
    assert client.send("t", b"m", properties={"x": 2}).merged is False
    assert client.send_many("t", [{"body": b"m", "properties": {"x": 2}}]).merged == 0
    assert client.stats("t").groups["g"].counters["filtered"] == 2


def test_merged_means_merged_in_every_group_that_accepted_it(client):
    client.create_topic("t")
    client.bind("t", "a", where="x = 1")
    client.bind("t", "b")
    client.send("t", b"m", properties={"x": 2})
    assert client.send("t", b"m", properties={"x": 2}).merged is True


def test_binding_again_replaces_the_filters_and_none_removes_them(client):
    client.create_topic("t")
    assert client.bind("t", "g", tags="a") is True
    assert client.bind("t", "g", where="x > 1") is False
    info = client.topic("t", fresh=True)
    assert (info.filter_of("g").tags, info.filter_of("g").where) == (None, "x > 1")
    client.send("t", b"tagged", tag="a")
    client.send("t", b"big", properties={"x": 2})
    assert bodies(client, "t", "g") == [b"big"]
    client.bind("t", "g")
    assert client.topic("t", fresh=True).filter_of("g").program == ""
    client.send("t", b"anything")
    assert bodies(client, "t", "g") == [b"anything"]


def test_keep_filters_binds_without_touching_a_bound_groups_filters(client):
    client.create_topic("t")
    client.bind("t", "g", where="x > 1")
    assert client.bind("t", "g", keep_filters=True) is False
    assert client.topic("t", fresh=True).filter_of("g").where == "x > 1"
    assert client.bind("t", "h", keep_filters=True) is True
    assert client.topic("t", fresh=True).filter_of("h").program == ""
    with pytest.raises(rmq.errors.ConflictingOptions):
        client.bind("t", "g", where="x > 2", keep_filters=True)


def test_a_consumer_starting_keeps_its_groups_filters(make_client):
    client = make_client(kind="sync")
    client.create_topic("t")
    client.bind("t", "g", where="x = 1")
    consumer = rmq.Consumer(client, "t", lambda m: None, group="g")
    consumer.start()
    consumer.stop()
    assert client.topic("t", fresh=True).filter_of("g").where == "x = 1"


def test_unbinding_drops_the_filters_with_the_binding(client):
    client.create_topic("t")
    client.bind("t", "g", where="x = 1")
    client.unbind("t", "g")
    client.bind("t", "g", keep_filters=True)
    client.send("t", b"m")
    assert bodies(client, "t", "g") == [b"m"]


def test_an_invalid_filter_writes_nothing(client):
    client.create_topic("t")
    client.bind("t", "g", where="x = 1")
    with pytest.raises(rmq.errors.InvalidFilter):
        client.bind("t", "g", where="x = ")
    with pytest.raises(rmq.errors.InvalidFilter):
        client.bind("t", "new", tags="a |")
    info = client.topic("t", fresh=True)
    assert info.groups == ("g",) and info.filter_of("g").where == "x = 1"


def test_bad_tags_and_properties_write_nothing(client):
    client.create_topic("t")
    with pytest.raises(rmq.errors.InvalidTag):
        client.send("t", b"x", tag="a b")
    with pytest.raises(rmq.errors.InvalidProperties):
        client.send("t", b"x", properties={"a": None})
    with pytest.raises(rmq.errors.InvalidProperties, match="batch item 1"):
        client.send_many("t", [{"body": b"ok", "properties": {"a": 1}},
                               {"body": b"bad", "properties": {"a": [1]}}])
    assert states(client, "t")["ready"] == []


def test_a_serial_key_is_found_behind_a_tag(client):
    client.create_topic("t", serial_keys=True)
    client.send("t", b"first", key="k", tag="a", properties={"n": 1})
    client.send("t", b"second", key="k", tag="b")
    (first,) = client.claim("t", count=10)
    assert first.body == b"first"
    assert client.claim("t", count=10) == []  # the key is held by the first
    client.ack(first)
    assert [m.body for m in client.claim("t", count=10)] == [b"second"]


def test_a_filter_on_the_default_group_applies_once_it_is_bound(client):
    client.create_topic("t")
    client.bind("t", "default", tags="keep")
    client.send_many("t", [{"body": b"a", "tag": "keep"}, {"body": b"b", "tag": "drop"}])
    assert bodies(client, "t", "default") == [b"a"]


def test_filters_hold_on_a_topic_that_keeps_a_heads_index(client):
    client.create_topic("t", slots=32)
    client.bind("t", "big", where="n >= 50")
    client.send_many("t", [{"body": str(n), "properties": {"n": n}} for n in range(100)])
    client.send("t", b"one", properties={"n": 99})
    claimed = client.claim("t", "big", count=1000)
    assert sorted(m.text for m in claimed) == sorted([str(n) for n in range(50, 100)] + ["one"])


def test_a_tagged_message_is_found_by_its_key(client):
    client.create_topic("t", slots=4)
    client.send("t", b"x", key="k1", tag="a", properties={"p": 1})
    client.send("t", b"y", key="k1")
    found = client.find_messages("t", key=b"k1")
    assert sorted((r.body, r.tag) for r in found) == [(b"x", "a"), (b"y", None)]


def test_filters_rmq_did_not_write_make_the_entry_corrupt(client):
    client.create_topic("t")
    client.bind("t", "g", where="x = 1")
    client.redis.hset(RegistryKeys("t").filters, "g", "not json")
    with pytest.raises(rmq.errors.CorruptRegistry, match="filters of group 'g'"):
        client.topic("t", fresh=True)


@pytest.mark.both_deployments
@pytest.mark.both_clients
def test_single_sends_joined_by_the_group_commit_are_filtered_each(make_client):
    client = make_client(kind="sync")
    client.create_topic("t", slots=2)
    client.bind("t", "even", where="n IN (0, 2, 4, 6, 8)")

    def sender(first: int) -> None:
        for n in range(first, 200, 8):
            client.send("t", str(n), properties={"n": n % 10})

    threads = [threading.Thread(target=sender, args=(i,)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(int(m.text) for m in drain(client, "t", "even")) == list(range(0, 200, 2))
    assert client.stats("t").groups["even"].counters["filtered"] == 100


def test_a_numpy_number_is_stored_as_the_number_it_is(client):
    client.create_topic("t")
    client.bind("t", "half", where="p = 1.5 AND n = 3")
    client.send("t", b"x", properties={"p": numpy.float64(1.5), "n": numpy.int64(3)})
    (message,) = drain(client, "t", "half")
    assert message.properties == {"p": 1.5, "n": 3}
    assert (type(message.properties["p"]), type(message.properties["n"])) == (float, int)
    assert client.stats("t").groups["half"].counters["filtered"] == 0


def test_a_property_that_is_not_a_plain_value_writes_nothing(client):
    from decimal import Decimal
    client.create_topic("t")
    for bad in (Decimal("1.5"), complex(1, 2), "\ud800", float("inf")):
        with pytest.raises(rmq.errors.InvalidProperties, match="'p'"):
            client.send("t", b"x", properties={"p": bad})
    with pytest.raises(rmq.errors.InvalidTag):
        client.send("t", b"x", tag="a\ud800")
    assert states(client, "t")["ready"] == []


def test_a_filter_with_a_lone_surrogate_is_invalid_and_writes_nothing(client):
    client.create_topic("t")
    with pytest.raises(rmq.errors.InvalidFilter, match="column 6"):
        client.bind("t", "g", where="a = '\ud800'")
    assert client.topic("t", fresh=True).groups == ("default",)


def test_tag_and_properties_count_against_max_message_bytes(client):
    client.create_topic("t", max_message_bytes=1000)
    with pytest.raises(rmq.errors.MessageTooLarge, match="properties"):
        client.send("t", b"x", properties={"a": "y" * 1000})
    with pytest.raises(rmq.errors.MessageTooLarge, match="properties"):
        client.send("t", b"x" * 990, tag="t" * 20)
    with pytest.raises(rmq.errors.MessageTooLarge, match="batch item 1"):
        client.send_many("t", [{"body": b"ok"},
                               {"body": b"x", "properties": {f"p{i}": "y" * 20
                                                             for i in range(64)}}])
    assert states(client, "t")["ready"] == []
    client.send("t", b"x" * 900, tag="small", properties={"a": 1})
    client.send("t", b"x" * 1000)
    assert len(states(client, "t")["ready"]) == 2
