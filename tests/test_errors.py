"""The errors of SPEC §2: typed, in ``rmq.errors``, each naming the problem, all ``RMQError``,
input errors also ``ValueError``; and when one is raised, nothing was written."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import rows
from redis.backoff import NoBackoff
from redis.retry import Retry

import rmq
from rmq import errors
from rmq.server import free_port

pytestmark = pytest.mark.single_node

INPUT_ERRORS = [errors.UnknownTopic, errors.InvalidTopicName, errors.MessageTooLarge,
                errors.InvalidPriority, errors.InvalidDelay, errors.DeliverAtInPast,
                errors.ConflictingOptions, errors.TopicConflict]


def nothing_written(client: rmq.Client, topic: str = "t") -> bool:
    counters = client.stats(topic).groups["default"].counters
    return rows(client, topic) == [] and counters["sent"] == 0


@pytest.mark.parametrize("error", INPUT_ERRORS)
def test_input_errors_are_rmq_errors_and_value_errors(error):
    assert issubclass(error, errors.RMQError)
    assert issubclass(error, ValueError)


def test_redis_unavailable_is_an_rmq_error_but_not_an_input_error():
    assert issubclass(errors.RedisUnavailable, errors.RMQError)
    assert not issubclass(errors.RedisUnavailable, ValueError)


def test_sending_to_an_unknown_topic(client):
    with pytest.raises(errors.UnknownTopic, match="unknown topic 'nope': create it first"):
        client.send("nope", b"x")
    assert client.topics() == []


def test_every_topic_operation_refuses_an_unknown_topic(client):
    for call in ("claim", "stats", "dead_letters", "bind", "pause", "recover", "send_many"):
        args = {"bind": ("nope", "g"), "send_many": ("nope", [b"x"])}.get(call, ("nope",))
        with pytest.raises(errors.UnknownTopic, match="'nope'"):
            getattr(client, call)(*args)
    assert client.topics() == []


def test_invalid_topic_names_are_refused_everywhere(client):
    for name in ("", "a" * 129, "has space", "brace{", "colon:x", "é", None, 7):
        with pytest.raises(errors.InvalidTopicName,
                           match=r"invalid topic name .*: use 1-128 characters of A-Z a-z"):
            client.create_topic(name)
        with pytest.raises(errors.InvalidTopicName):
            client.send(name, b"x")
    assert client.topics() == []


def test_valid_topic_names_use_the_whole_charset(client):
    name = "Prices.v2_eu-west" + "x" * 111
    client.create_topic(name)
    assert client.topics() == [name]


def test_invalid_group_name(client):
    client.create_topic("t")
    with pytest.raises(errors.InvalidGroupName, match="invalid group name 'a b'"):
        client.bind("t", "a b")
    assert client.topic("t", fresh=True).bound_groups == ()


def test_message_too_large(client):
    client.create_topic("t", max_message_bytes=10)
    with pytest.raises(errors.MessageTooLarge, match="11 bytes exceeds .*max_message_bytes of 10"):
        client.send("t", b"x" * 11)
    assert nothing_written(client)
    client.send("t", b"x" * 10)


def test_message_too_large_counts_utf8_bytes_not_characters(client):
    client.create_topic("t", max_message_bytes=4)
    with pytest.raises(errors.MessageTooLarge):
        client.send("t", "€€")  # 2 characters, 6 bytes
    assert nothing_written(client)


def test_invalid_priority(client):
    client.create_topic("t")
    for priority in (-1, 256, 1.5, "high", True):
        with pytest.raises(errors.InvalidPriority, match=f"0 to 255, got {priority!r}"):
            client.send("t", b"x", priority=priority)
    assert nothing_written(client)


def test_non_positive_or_non_numeric_delay(client):
    client.create_topic("t")
    for delay in (0, -5, -0.5, "10", True):
        with pytest.raises(errors.InvalidDelay, match="delay_ms must be"):
            client.send("t", b"x", delay_ms=delay)
    assert nothing_written(client)


def test_delay_beyond_max_delay(client):
    client.create_topic("t", max_delay=60)
    with pytest.raises(errors.InvalidDelay, match="beyond the topic's max_delay of 60"):
        client.send("t", b"x", delay_ms=60_001)
    assert nothing_written(client)


def test_deliver_at_beyond_max_delay(client, clock):
    client.create_topic("t", max_delay=60)
    with pytest.raises(errors.InvalidDelay, match="max_delay"):
        client.send("t", b"x", deliver_at=clock() + 60_001)
    assert nothing_written(client)


def test_default_max_delay_is_thirty_days(client, clock):
    client.create_topic("t")
    day = 86_400_000
    client.send("t", b"ok", delay_ms=30 * day)
    with pytest.raises(errors.InvalidDelay):
        client.send("t", b"too far", delay_ms=30 * day + 1)
    assert [r.body for r in rows(client, "t")] == [b"ok"]


def test_deliver_at_not_in_the_future(client, clock):
    client.create_topic("t")
    for offset in (0, -1, -86_400_000):
        with pytest.raises(errors.DeliverAtInPast, match="is not in the future"):
            client.send("t", b"x", deliver_at=clock() + offset)
    assert nothing_written(client)


def test_deliver_at_naive_datetime_is_refused(client, clock):
    client.create_topic("t")
    naive = datetime.fromtimestamp(clock() / 1000) + timedelta(minutes=1)
    with pytest.raises(errors.InvalidDelay, match="timezone-aware"):
        client.send("t", b"x", deliver_at=naive)
    assert nothing_written(client)


def test_delay_with_deliver_at_conflicts(client, clock):
    client.create_topic("t")
    with pytest.raises(errors.ConflictingOptions, match="delay_ms and deliver_at cannot be"):
        client.send("t", b"x", delay_ms=5, deliver_at=clock() + 5)
    assert nothing_written(client)


def test_body_with_json_conflicts(client):
    client.create_topic("t")
    with pytest.raises(errors.ConflictingOptions, match="either a body or json="):
        client.send("t", b"x", json={"a": 1})
    assert nothing_written(client)


def test_a_body_must_be_bytes_or_str(client):
    client.create_topic("t")
    for body in (None, 12, {"a": 1}):
        with pytest.raises(errors.InvalidMessage, match="body"):
            client.send("t", body)
    assert nothing_written(client)


def test_unserialisable_json(client):
    client.create_topic("t")
    with pytest.raises(errors.InvalidMessage, match="json value cannot be serialised"):
        client.send("t", json={"price": float("nan")})
    with pytest.raises(errors.InvalidMessage, match="json value"):
        client.send("t", json={"when": object()})
    assert nothing_written(client)


def test_create_topic_again_with_other_settings_conflicts(client):
    client.create_topic("t", slots=4)
    with pytest.raises(errors.TopicConflict, match="topic 't' exists with other settings"):
        client.create_topic("t", slots=8)
    assert client.topic("t", fresh=True).settings.slots == 4


def test_invalid_topic_settings(client):
    for settings, text in (({"slots": 3}, "power of two"), ({"slots": 2048}, "slots must be"),
                           ({"max_retries": -1}, "max_retries"),
                           ({"visibility_timeout": 0}, "visibility_timeout"),
                           ({"retry_backoff": -1}, "retry_backoff"),
                           ({"colour": "blue"}, "unknown topic setting")):
        with pytest.raises(errors.InvalidSetting, match=text):
            client.create_topic("t", **settings)
    assert client.topics() == []


def test_send_many_rejects_the_whole_batch_naming_the_bad_item(client):
    client.create_topic("t", slots=4, max_message_bytes=64)
    for bad, error, text in (
        ({"body": b"x", "priority": 300}, errors.InvalidPriority, "0 to 255"),
        ({"body": b"x", "delay_ms": -1}, errors.InvalidDelay, "positive"),
        ({"body": b"x" * 100}, errors.MessageTooLarge, "exceeds"),
        ({"body": b"x", "deliver_at": 1}, errors.DeliverAtInPast, "not in the future"),
        ({"body": b"x", "delay_ms": 5, "deliver_at": 10**15}, errors.ConflictingOptions,
         "cannot be combined"),
        ({"body": b"x", "json": [1]}, errors.ConflictingOptions, "either a body or json="),
        ({"body": b"x", "colour": "blue"}, errors.InvalidMessage, "unknown send option"),
        (42, errors.InvalidMessage, "must be bytes or str"),
    ):
        items = [b"a", {"body": b"b", "priority": 5}, "c", bad, b"e"]
        with pytest.raises(error, match=f"batch item 3: .*{text}"):
            client.send_many("t", items)
    assert nothing_written(client)


def test_send_many_needs_an_iterable_of_items(client):
    client.create_topic("t")
    with pytest.raises(errors.InvalidMessage, match="iterable"):
        client.send_many("t", b"abc")
    assert nothing_written(client)


def test_unreachable_redis_raises_redis_unavailable():
    url = f"redis://127.0.0.1:{free_port()}"
    with pytest.raises(errors.RedisUnavailable, match="unreachable"):
        rmq.Client(url, retry=Retry(NoBackoff(), 1)).send("t", b"x")


def test_redis_going_away_raises_redis_unavailable_after_bounded_retries(fresh_server):
    server = fresh_server()
    c = rmq.Client(server.url, retry=Retry(NoBackoff(), 2))
    try:
        c.create_topic("t")
        c.send("t", b"x")
        server.kill()
        with pytest.raises(errors.RedisUnavailable, match="unreachable after retrying"):
            c.send("t", b"y")
    finally:
        c.close()


def test_claim_count_out_of_range(client):
    client.create_topic("t")
    client.send("t", b"x")
    for count in (0, -1, 10_001, 2.5, True):
        with pytest.raises(errors.InvalidArgument, match="count must be an integer from 1 to"):
            client.claim("t", count=count)
    assert [r.state for r in rows(client, "t")] == ["ready"]
