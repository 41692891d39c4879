"""Versions (SPEC §14 "Newest at completion", docs/semantics.md "Versions"): on a topic
merging by key, ``send(..., version=N)`` keeps the value of the highest version sent for its
key; an older one arriving later is dropped for every group and counted ``outdated`` in each,
never stored as newest. An equal version merges as a send without one; a send without a
version is not checked. The highest is remembered for ``version_retention`` after the key's
last versioned send, and never forgotten while a value of the key is pending."""

from __future__ import annotations

import random

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import drain, states

from rmq.errors import ConflictingOptions, InvalidArgument, InvalidSetting
from rmq.storage.keys import SlotKeys

pytestmark = [pytest.mark.both_deployments, pytest.mark.sync_client]

DAY_MS = 86_400_000


def _outdated(client, topic: str) -> dict[str, int]:
    return {name: group.counters.get("outdated", 0)
            for name, group in client.stats(topic).groups.items()}


@pytest.mark.both_clients
def test_out_of_order_versions_keep_the_highest(client):
    client.create_topic("prices", merge="key")
    assert not client.send("prices", "v2", key="p", version=2).outdated
    assert not client.send("prices", "v5", key="p", version=5).outdated
    late = client.send("prices", "v3", key="p", version=3)
    assert (late.outdated, late.merged) == (True, False)
    assert states(client, "prices")["ready"] == [b"v5"]
    (message,) = drain(client, "prices")
    assert message.body == b"v5"
    # handled: the highest is still remembered, an older value is still dropped
    assert client.send("prices", "v4", key="p", version=4).outdated
    assert states(client, "prices")["ready"] == []
    assert _outdated(client, "prices") == {"default": 2}


def test_an_older_version_is_dropped_and_counted_in_every_group(client):
    client.create_topic("prices", merge="key")
    client.bind("prices", "render")
    client.bind("prices", "index", tags="price")
    client.send("prices", "v9", key="p", version=9, tag="price")
    assert client.send("prices", "v1", key="p", version=1, tag="price").outdated
    for group in ("render", "index"):
        assert states(client, "prices", group)["ready"] == [b"v9"]
    outdated = _outdated(client, "prices")
    assert (outdated["render"], outdated["index"]) == (1, 1)
    counters = client.stats("prices").groups["render"].counters
    assert (counters["sent"], counters["merged"]) == (1, 0)


def test_an_equal_version_merges_as_a_send_without_one(client):
    client.create_topic("prices", merge="key")
    client.send("prices", "first", key="p", version=7)
    again = client.send("prices", "second", key="p", version=7)
    assert (again.merged, again.outdated) == (True, False)
    assert states(client, "prices")["ready"] == [b"second"]


def test_a_send_without_a_version_is_not_checked_and_leaves_the_highest(client):
    client.create_topic("prices", merge="key")
    client.send("prices", "v5", key="p", version=5)
    assert not client.send("prices", "plain", key="p").outdated
    assert states(client, "prices")["ready"] == [b"plain"]
    assert client.send("prices", "v4", key="p", version=4).outdated
    assert states(client, "prices")["ready"] == [b"plain"]


@pytest.mark.both_clients
def test_a_batch_in_any_order_leaves_each_keys_highest_version(client):
    client.create_topic("prices", merge="key", slots=4)
    items = [{"body": f"{product}:{v}", "key": product, "version": v}
             for product in ("a", "b", "c") for v in range(1, 11)]
    random.Random(7).shuffle(items)
    counts = client.send_many("prices", items[:15])
    counts2 = client.send_many("prices", items[15:])
    assert counts.sent + counts2.sent == 30
    bodies = sorted(m.body for m in drain(client, "prices"))
    assert bodies == [b"a:10", b"b:10", b"c:10"]
    assert _outdated(client, "prices")["default"] == counts.outdated + counts2.outdated > 0


def test_a_batch_mixing_versioned_and_plain_messages_keeps_send_order(client):
    client.create_topic("prices", merge="key", slots=1)
    counts = client.send_many("prices", [
        {"body": "a3", "key": "a", "version": 3}, {"body": "b", "key": "b"},
        {"body": "a1", "key": "a", "version": 1}, {"body": "a4", "key": "a", "version": 4},
        {"body": "a2", "key": "a", "version": 2, "priority": 200}])
    assert (counts.sent, counts.merged, counts.outdated) == (5, 1, 2)
    assert sorted(m.body for m in drain(client, "prices")) == [b"a4", b"b"]


def test_the_highest_is_forgotten_after_the_retention_not_while_pending(client, clock):
    client.create_topic("prices", merge="key", version_retention=60, slots=1)
    client.send("prices", "v5", key="p", version=5)
    clock.advance(61_000)
    # another key's versioned send forgets what the retention passed, but p is pending
    client.send("prices", "q1", key="q", version=1)
    assert client.send("prices", "v4", key="p", version=4).outdated
    drain(client, "prices")
    clock.advance(61_000)
    client.send("prices", "q2", key="q", version=2)
    # p was handled more than the retention ago: forgotten, an older version is new again
    assert not client.send("prices", "v3", key="p", version=3).outdated
    assert states(client, "prices")["ready"] == [b"q2", b"v3"]


def test_version_retention_is_a_setting_alter_topic_changes(client):
    client.create_topic("prices", merge="key")
    assert client.topic("prices").settings.version_retention == 86_400
    assert client.alter_topic("prices", version_retention=3600).version_retention == 3600
    with pytest.raises(InvalidSetting, match="version_retention"):
        client.alter_topic("prices", version_retention=0)


def test_a_bad_version_is_refused_and_a_batch_with_one_stores_nothing(client):
    client.create_topic("prices", merge="key")
    for bad in (-1, 2**53, True, 1.5, "3"):
        with pytest.raises(InvalidArgument, match="version must be an integer"):
            client.send("prices", "v", key="p", version=bad)
    with pytest.raises(InvalidArgument, match="batch item 1: version"):
        client.send_many("prices", [{"body": "a", "key": "a", "version": 1},
                                    {"body": "b", "key": "b", "version": -5}])
    assert states(client, "prices")["ready"] == []
    client.create_topic("bodies")
    with pytest.raises(ConflictingOptions, match="merging by key"):
        client.send("bodies", "v", version=1)
    assert client.send("prices", "top", key="p", version=2**53 - 1).merged is False
    assert client.send("prices", "below", key="p", version=2**53 - 2).outdated


@pytest.mark.sync_client
def test_a_deleted_topic_leaves_no_versions(client):
    client.create_topic("prices", merge="key", slots=2)
    client.send_many("prices", [{"body": f"{k}", "key": f"{k}", "version": 1}
                                for k in range(20)])
    versions = [key for slot in range(2)
                for key in (SlotKeys("prices", slot).versions,
                            SlotKeys("prices", slot).versions_seen)]
    assert sum(client.redis.exists(key) for key in versions) == 4
    client.delete_topic("prices")
    assert sum(client.redis.exists(key) for key in versions) == 0


@pytest.mark.both_clients
def test_a_transactions_halves_are_checked_at_commit(client):
    client.create_topic("prices", merge="key")
    client.send("prices", "v6", key="p", version=6)
    with client.transaction("prices") as tx:
        tx.send("v2", key="p", version=2)
        tx.send_many([{"body": "v8", "key": "q", "version": 8},
                      {"body": "v7", "key": "q", "version": 7}])
    assert sorted(m.body for m in drain(client, "prices")) == [b"v6", b"v8"]
    assert _outdated(client, "prices") == {"default": 2}


def test_an_outdated_send_is_traced_in_every_group(client):
    client.create_topic("prices", merge="key", trace=True)
    client.bind("prices", "render")
    client.bind("prices", "index")
    sent = client.send("prices", "v5", key="p", version=5)
    client.send_many("prices", [{"body": "v3", "key": "p", "version": 3},
                                {"body": "v6", "key": "p", "version": 6}])
    events = client.trace("prices", sent.message_id)
    for group in ("render", "index"):
        assert [e.event for e in events if e.group == group] == ["sent", "outdated", "merged"]


def test_a_transaction_part_sent_again_keeps_its_versions_and_stores_nothing_twice(client):
    client.create_topic("prices", merge="key", slots=1)
    items = [{"body": f"{key}{v}", "key": key, "version": v}
             for key, v in (("a", 3), ("b", 1), ("a", 2), ("c", 5))]
    first = client.transaction("prices", id="q-1", part="p0")
    assert first.send_many(items[:3]) == 3
    again = client.transaction("prices", id="q-1", part="p0")
    # a re-run from the start: the first three are stored already, the plain one beyond
    assert again.send_many([*items, {"body": "plain", "key": "d"}]) == 2
    counts = client.transaction("prices", id="q-1").commit()
    assert (counts.sent, counts.outdated) == (5, 1)
    assert sorted(m.body for m in drain(client, "prices")) == [b"a3", b"b1", b"c5", b"plain"]


def test_half_messages_with_versions_show_in_the_snapshot(client):
    client.create_topic("prices", merge="key", slots=1)
    tx = client.transaction("prices", id="snap")
    tx.send_many([{"body": "a2", "key": "a", "version": 2}, {"body": "b", "key": "b"},
                  {"body": "a1", "key": "a", "version": 1}])
    assert [(r.state, r.body, r.key) for r in client.snapshot("prices")] == [
        ("half", b"a2", b"a"), ("half", b"b", b"b"), ("half", b"a1", b"a")]


def test_a_key_sent_again_after_its_retention_is_forgotten_before_it_is_checked(client, clock):
    client.create_topic("prices", merge="key", version_retention=60, slots=1)
    client.send("prices", "v5", key="p", version=5)
    drain(client, "prices")
    clock.advance(61_000)
    assert not client.send("prices", "v1", key="p", version=1).outdated
    assert states(client, "prices")["ready"] == [b"v1"]
