"""Cancel (SPEC §14, docs/semantics.md "Supersede and cancel"): ``cancel(topic, message_id,
group=None)`` removes the message where it is pending and tells its running deliveries to
stop as a supersede does; both counted ``cancelled`` and traced; an id that names nothing
pending or running is refused with UnknownMessage."""

from __future__ import annotations

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import states

from rmq.errors import InvalidArgument, UnknownMessage

pytestmark = [pytest.mark.single_node, pytest.mark.both_clients]


def counters(client, topic, group="default"):
    return client.stats(topic).groups[group].counters


def test_a_pending_message_is_removed_in_every_group(client):
    client.create_topic("renders", slots=4)
    client.bind("renders", "gpu")
    client.bind("renders", "audit")
    sent = client.send("renders", "product-42", delay_ms=60_000)
    client.send("renders", "product-7")
    assert client.cancel("renders", sent.message_id) == (2, 0)
    for group in ("gpu", "audit"):
        assert states(client, "renders", group)["delayed"] == []
        assert states(client, "renders", group)["ready"] == [b"product-7"]
        assert counters(client, "renders", group)["cancelled"] == 1


def test_a_running_delivery_is_told_to_stop_and_dropped(client, make_client):
    client.create_topic("prices", merge="key")
    sent = client.send("prices", "price=10", key="product-42")
    consumer = make_client("sync")
    (running,) = consumer.claim("prices")
    assert client.cancel("prices", sent.message_id, group="default") == (0, 1)
    assert running.wait_superseded(timeout=10)
    assert running.stop_reason == "cancelled"
    assert consumer.nack(running, "stopped") == "cancelled"  # dropped, not retried
    assert states(client, "prices") == {"ready": [], "delayed": [], "in_flight": [],
                                        "dead": []}
    assert counters(client, "prices")["cancelled"] == 1


def test_a_message_pending_and_running_at_once_is_cancelled_in_both(client):
    client.create_topic("renders")
    sent = client.send("renders", "p")
    (running,) = client.claim("renders")
    client.send("renders", "p")  # pending again while it runs
    assert client.cancel("renders", sent.message_id) == (1, 1)
    assert client.ack(running) == 1
    assert states(client, "renders")["ready"] == []


def test_an_unknown_or_malformed_id_is_refused(client):
    client.create_topic("renders")
    sent = client.send("renders", "p")
    drained = client.claim("renders")
    client.ack(drained)
    with pytest.raises(UnknownMessage, match=sent.message_id):
        client.cancel("renders", sent.message_id)
    with pytest.raises(InvalidArgument, match="message_id"):
        client.cancel("renders", "not-an-id")
    client.send("renders", "p")
    with pytest.raises(UnknownMessage, match="group 'gpu'"):
        client.cancel("renders", sent.message_id, group="gpu")


def test_the_trace_records_the_cancel(client):
    client.create_topic("renders", trace=True)
    sent = client.send("renders", "p")
    client.cancel("renders", sent.message_id)
    assert [e.event for e in client.trace("renders", sent.message_id)] == ["sent",
                                                                          "cancelled"]
