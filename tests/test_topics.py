"""The topic registry (SPEC §1, §4): create (idempotent, or TopicConflict), list, inspect,
alter, pause and resume, delete with everything the topic holds."""

from __future__ import annotations

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import rows

import rmq
from rmq import errors
from rmq.storage.keys import RegistryKeys
from rmq.storage.registry import ConsumerState

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]


def test_create_topic_with_the_default_settings(client):
    settings = client.create_topic("prices")
    assert settings == rmq.TopicSettings()
    assert (settings.slots, settings.max_retries, settings.visibility_timeout) == (8, 16, 30.0)
    assert settings.max_message_bytes == 4 * 1024 * 1024
    assert settings.max_delay == 30 * 86_400
    assert (settings.retry_backoff, settings.retry_backoff_max) == (1.0, 300.0)


def test_create_topic_is_idempotent_for_the_same_settings(client):
    first = client.create_topic("t", slots=16, max_retries=3)
    client.send("t", b"kept")
    again = client.create_topic("t", slots=16, max_retries=3)
    assert first == again
    assert [r.body for r in rows(client, "t")] == [b"kept"]


def test_create_topic_with_other_settings_raises_and_keeps_the_original(client):
    client.create_topic("t", max_retries=3)
    with pytest.raises(errors.TopicConflict, match="use alter_topic"):
        client.create_topic("t", max_retries=4)
    assert client.topic("t", fresh=True).settings.max_retries == 3


def test_create_topic_again_compares_only_the_settings_it_is_given(client):
    # the README's start-up line, after an operator turned the trace on and changed a timeout
    client.create_topic("renders", slots=8, max_retries=16)
    client.alter_topic("renders", trace=True, visibility_timeout=120)
    again = client.create_topic("renders", slots=8, max_retries=16)
    assert (again.trace, again.visibility_timeout, again.slots) == (True, 120, 8)
    assert client.create_topic("renders") == again  # no setting given: none compared
    assert client.topic("renders", fresh=True).settings == again  # nothing written


def test_a_conflict_names_each_differing_setting_in_one_line(client):
    client.create_topic("t", slots=4, max_retries=3, trace=True)
    with pytest.raises(errors.TopicConflict) as raised:
        client.create_topic("t", slots=8, max_retries=5, trace=True, retry_backoff=1.0)
    assert str(raised.value) == (
        "topic 't' exists with other settings (slots 4, not 8; max_retries 3, not 5): use "
        "alter_topic() to change them; slots cannot change after creation")
    assert raised.value.differences == {"slots": (4, 8), "max_retries": (3, 5)}
    assert raised.value.fixed == ("slots",)
    with pytest.raises(errors.TopicConflict, match=r"\(max_retries 3, not 4\): use alter_topic"
                                                   r"\(\) to change them$"):
        client.create_topic("t", max_retries=4)


def test_topics_lists_every_registered_topic_sorted(client):
    for name in ("b", "a", "c.d"):
        client.create_topic(name)
    assert client.topics() == ["a", "b", "c.d"]


def test_topic_shows_settings_groups_and_paused_flag(client):
    client.create_topic("t", slots=2, serial_keys=True)
    client.bind("t", "g2")
    client.bind("t", "g1")
    info = client.topic("t", fresh=True)
    assert (info.name, info.settings.slots, info.settings.serial_keys) == ("t", 2, True)
    assert (info.bound_groups, info.paused) == (("g1", "g2"), False)


def test_alter_topic_changes_settings_but_not_slots(client):
    client.create_topic("t", slots=4)
    altered = client.alter_topic("t", visibility_timeout=5, retry_backoff=0)
    assert (altered.visibility_timeout, altered.retry_backoff, altered.slots) == (5, 0, 4)
    assert client.topic("t", fresh=True).settings == altered
    with pytest.raises(errors.InvalidSetting, match="slots cannot be changed"):
        client.alter_topic("t", slots=8)
    with pytest.raises(errors.InvalidSetting, match="unknown topic setting"):
        client.alter_topic("t", colour="blue")
    with pytest.raises(errors.InvalidSetting, match="max_retries"):
        client.alter_topic("t", max_retries=-1)
    assert client.topic("t", fresh=True).settings == altered


def test_alter_topic_of_an_unknown_topic(client):
    with pytest.raises(errors.UnknownTopic):
        client.alter_topic("nope", max_retries=1)
    assert client.topics() == []


def test_altered_lease_applies_to_the_next_claim(client, clock):
    client.create_topic("t", visibility_timeout=30)
    client.alter_topic("t", visibility_timeout=2)
    client.send("t", b"x")
    client.claim("t")
    (row,) = rows(client, "t")
    assert row.lease_until == clock() + 2000


def test_altered_max_message_bytes_applies_to_the_next_send(client):
    client.create_topic("t", max_message_bytes=100)
    client.alter_topic("t", max_message_bytes=3)
    with pytest.raises(errors.MessageTooLarge):
        client.send("t", b"four")


def test_paused_topic_accepts_sends_but_yields_no_claims_until_resumed(client):
    client.create_topic("t")
    client.pause("t")
    assert client.topic("t", fresh=True).paused
    assert not client.send("t", b"x").merged
    assert client.claim("t") == []
    assert client.stats("t").paused
    client.resume("t")
    assert [m.body for m in client.claim("t")] == [b"x"]


@pytest.mark.both_clients
def test_pause_is_seen_by_other_clients(make_client, clock):
    admin = make_client(clock=clock)
    worker = make_client(clock=clock, registry_ttl=0)
    admin.create_topic("t")
    admin.send("t", b"x")
    admin.pause("t")
    assert worker.claim("t") == []
    admin.resume("t")
    assert len(worker.claim("t")) == 1


@pytest.mark.both_deployments
def test_delete_topic_removes_every_message_in_every_state(client, clock):
    client.create_topic("t", slots=4, max_retries=0, serial_keys=True)
    client.bind("t", "a")
    client.bind("t", "b")
    client.send_many("t", [{"body": f"m{i}", "key": f"k{i}"} for i in range(4)])
    client.send("t", b"later", delay_ms=10_000)
    held = client.claim("t", "a", count=4)
    client.nack(held[0], "dead")  # a: one dead, three in flight, one delayed; b: all pending
    client.pause("t")
    assert {r.state for r in rows(client, "t")} == {"ready", "delayed", "in_flight", "dead"}

    client.delete_topic("t")

    assert client.topics() == []
    with pytest.raises(errors.UnknownTopic):
        client.send("t", b"x")
    assert list(client.redis.scan_iter(match="rmq:{t*")) == []
    client.create_topic("t", slots=4)
    assert rows(client, "t") == []
    stats = client.stats("t")
    assert not stats.paused
    assert stats.groups["default"].counters["sent"] == 0
    assert client.topic("t", fresh=True).bound_groups == ()


def test_delete_topic_leaves_other_topics_alone(client):
    client.create_topic("t")
    client.create_topic("t2")
    client.send("t", b"x")
    client.send("t2", b"y")
    client.delete_topic("t")
    assert client.topics() == ["t2"]
    assert [r.body for r in rows(client, "t2")] == [b"y"]


def test_delete_of_an_unknown_topic(client):
    with pytest.raises(errors.UnknownTopic):
        client.delete_topic("nope")


def test_delete_topic_also_removes_what_an_unbound_group_still_holds(client):
    client.create_topic("t")
    client.bind("t", "gone")
    client.send("t", b"x")
    client.unbind("t", "gone")
    client.delete_topic("t")
    assert list(client.redis.scan_iter(match="rmq:{t*")) == []
    client.create_topic("t")
    client.bind("t", "gone")
    assert client.claim("t", "gone") == []


def test_a_dead_consumer_is_listed_for_ten_minutes_with_its_last_numbers_then_dropped(
        client, clock):
    client.create_topic("t")
    client.heartbeat(ConsumerState("gone", "t", "default", "host", 1, client.now(), 4, 2, 10,
                                   1))
    clock.advance(599_000)
    (gone,) = client.consumers("t")
    assert (gone.alive, gone.in_flight, gone.handled) == (False, 2, 10)  # its last heartbeat
    clock.advance(2_000)
    assert client.consumers("t") == []
    assert client.redis.hlen(RegistryKeys("t").consumers) == 0  # the record is gone too
