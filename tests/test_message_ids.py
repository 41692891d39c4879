"""Message ids (SPEC §11): a ``message_id`` derived from the topic and what makes two sends
merge, the same for every send of that content, shown by everything that shows a message."""

from __future__ import annotations

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import rows

import rmq

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]


def test_every_send_of_the_same_content_has_the_same_message_id(client):
    client.create_topic("t", slots=4)
    first = client.send("t", b"product:42")
    merged = client.send("t", b"product:42")
    assert merged.merged and merged.message_id == first.message_id
    client.ack(client.claim("t"))
    later = client.send("t", b"product:42")  # a later send, after the first was handled
    assert not later.merged and later.message_id == first.message_id
    assert len(first.message_id) == 16 and int(first.message_id, 16) >= 0


def test_what_makes_sends_merge_makes_their_message_ids_differ(client):
    client.create_topic("t")
    client.create_topic("other")
    ids = {
        client.send("t", b"x").message_id,
        client.send("t", b"y").message_id,
        client.send("t", b"x", key="k").message_id,
        client.send("t", b"x", tag="urgent").message_id,
        client.send("t", b"x", properties={"region": "eu"}).message_id,
        client.send("other", b"x").message_id,
    }
    assert len(ids) == 6
    # the same content, however it is spelled, merges and has one id
    assert (client.send("t", json={"a": 1, "b": 2}).message_id
            == client.send("t", json={"b": 2, "a": 1}).message_id)
    assert (client.send("t", b"x", slot_basis="k").message_id
            == client.send("t", b"x", key="k").message_id)


def test_send_many_returns_each_message_id_in_batch_order(client):
    client.create_topic("t", slots=8)
    items = [b"a", {"body": b"b", "key": "k"}, b"a", {"body": b"c", "tag": "x"}]
    counts = client.send_many("t", items)
    assert (counts.sent, counts.merged) == (4, 1)
    singles = [client.send("t", b"a"), client.send("t", b"b", key="k"), client.send("t", b"a"),
               client.send("t", b"c", tag="x")]
    assert list(counts.message_ids) == [s.message_id for s in singles]
    assert counts.message_ids[1] == singles[1].message_id and len(counts.message_ids) == 4


def test_a_delivery_and_its_dead_letter_carry_the_message_id_of_its_sends(client):
    client.create_topic("t", max_retries=0)
    sent = client.send("t", b"doomed", key="k", tag="t1", properties={"n": 1})
    (message,) = client.claim("t")
    assert message.message_id == sent.message_id
    assert message.id != message.message_id  # the delivery keeps its own id
    client.nack(message, "boom")
    (letter,) = client.dead_letters("t")
    assert letter.message_id == sent.message_id
    assert letter.id == f"{message.id}-{message.generation}"  # its delivery, of this topic


def test_snapshot_rows_and_found_messages_show_the_message_id(client):
    client.create_topic("t", slots=2)
    ready = client.send("t", b"ready")
    flying = client.send("t", b"flying", priority=200)
    client.claim("t", count=1)
    by_body = {row.body: row for row in rows(client, "t")}
    assert by_body[b"ready"].message_id == ready.message_id
    assert by_body[b"flying"].message_id == flying.message_id
    (found,) = client.find_messages("t", b"flying")
    assert found.message_id == flying.message_id and found.state == "in_flight"


def test_message_id_of_names_a_message_as_sent_with_a_bare_body(client):
    client.create_topic("t")
    assert client.send("t", b"plain").message_id == rmq.message_id_of("t", b"plain")


def test_message_id_of_takes_a_str_as_send_does_and_refuses_what_it_cannot_take(client):
    client.create_topic("t")
    client.create_topic("prices", merge="key")
    assert client.send("t", "plain").message_id == rmq.message_id_of("t", "plain")
    assert client.send("t", "é").message_id == rmq.message_id_of("t", "é")
    sent = client.send("prices", "price=10", key="product-42")
    assert sent.message_id == rmq.message_id_of("prices", "product-42")  # its key's
    for topic, member, words in [("t", 42, "member must be bytes or str, got int"),
                                 ("t", None, "member must be bytes or str, got NoneType"),
                                 (b"t", b"x", "topic must be a str, got bytes"),
                                 ("t", "\udc80", "member is not encodable as UTF-8")]:
        with pytest.raises(rmq.errors.InvalidArgument, match=words):
            rmq.message_id_of(topic, member)
