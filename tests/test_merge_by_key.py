"""Merging by key (SPEC §14, docs/semantics.md "Merging by key"): on a topic created with
``merge="key"`` a message's identity is its key (else its slot basis, else its body); a send
whose identity is pending in a group merges into it and its body, tag and properties replace
the pending ones (the last value wins), keeping the earliest due time and the highest
priority; the message id names the key for good."""

from __future__ import annotations

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import drain, rows, states

import rmq
from rmq.errors import ConflictingOptions, InvalidSetting

# one slot's script semantics: the single node and the sync client, but for the last test
pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]


def test_a_newer_value_of_a_pending_key_replaces_it_and_merges(client):
    client.create_topic("prices", merge="key")
    first = client.send("prices", "price=10", key="product-42")
    second = client.send("prices", "price=12", key="product-42")
    assert (first.merged, second.merged) == (False, True)
    assert first.message_id == second.message_id == rmq.message_id_of("prices", b"product-42")
    assert states(client, "prices")["ready"] == [b"price=12"]
    (message,) = drain(client, "prices")
    assert (message.body, message.key, message.message_id) == (
        b"price=12", b"product-42", first.message_id)
    counters = client.stats("prices").groups["default"].counters
    assert (counters["sent"], counters["merged"], counters["acked"]) == (2, 1, 1)


def test_body_mode_keeps_both_values_of_a_key(client):
    client.create_topic("prices")
    client.send("prices", "price=10", key="product-42")
    assert not client.send("prices", "price=12", key="product-42").merged
    assert states(client, "prices")["ready"] == [b"price=10", b"price=12"]


def test_the_merged_message_keeps_the_earliest_due_time_and_the_highest_priority(client,
                                                                                clock):
    client.create_topic("prices", merge="key")
    client.send("prices", "urgent", key="k", priority=250)
    client.send("prices", "later", key="k", priority=10, delay_ms=60_000)
    (row,) = rows(client, "prices")
    assert (row.state, row.body, row.priority) == ("ready", b"later", 250)
    # a delayed one takes a newer value due now: it is ready now, with that value
    client.send("prices", "v1", key="d", delay_ms=60_000)
    client.send("prices", "v2", key="d")
    assert {r.body: r.state for r in rows(client, "prices")} == {b"later": "ready",
                                                                   b"v2": "ready"}


def test_values_of_one_key_in_one_batch_leave_the_last(client):
    client.create_topic("prices", merge="key", slots=4)
    counts = client.send_many("prices", [
        {"body": "a1", "key": "a"}, {"body": "b1", "key": "b"}, {"body": "a2", "key": "a"},
        {"body": "a3", "key": "a", "priority": 200}, "plain", "plain"])
    assert (counts.sent, counts.merged) == (6, 3)
    assert counts.message_ids[0] == counts.message_ids[2] == rmq.message_id_of("prices", b"a")
    taken = {m.key or m.body: (m.body, m.priority) for m in drain(client, "prices")}
    assert taken == {b"a": (b"a3", 200), b"b": (b"b1", 128), b"plain": (b"plain", 128)}


def test_tag_and_properties_of_the_newest_value_win(client):
    client.create_topic("prices", merge="key")
    client.send("prices", "v1", key="k", tag="old", properties={"price": 10})
    client.send("prices", "v2", key="k", properties={"price": 12, "currency": "EUR"})
    (message,) = client.claim("prices")
    assert (message.body, message.tag, dict(message.properties)) == (
        b"v2", None, {"price": 12, "currency": "EUR"})


def test_a_value_sent_while_its_key_is_in_flight_is_a_new_pending_message(client):
    client.create_topic("prices", merge="key")
    client.send("prices", "v1", key="k")
    (running,) = client.claim("prices")
    assert not client.send("prices", "v2", key="k").merged
    assert states(client, "prices") == {"ready": [b"v2"], "delayed": [], "in_flight": [b"v1"],
                                        "dead": []}
    client.ack([running])
    assert [m.body for m in drain(client, "prices")] == [b"v2"]


def test_a_retry_or_a_release_of_an_older_value_keeps_the_newer_pending_one(client, clock):
    client.create_topic("prices", merge="key", retry_backoff=0)
    client.send("prices", "v1", key="k")
    client.send("prices", "w1", key="w")
    first, other = sorted(client.claim("prices", count=2), key=lambda m: m.body)
    client.send("prices", "v2", key="k")
    client.send("prices", "w2", key="w")
    assert client.nack(first, "boom") == "retried"
    assert client.release([other]) == 1
    taken = {m.key: (m.body, m.attempts) for m in drain(client, "prices")}
    # merged into the newer pending ones: their values and attempt counts (new work)
    assert taken == {b"k": (b"v2", 1), b"w": (b"w2", 1)}


def test_a_retry_with_nothing_newer_pending_comes_back_with_its_own_value(client, clock):
    client.create_topic("prices", merge="key", retry_backoff=0)
    client.send("prices", "v1", key="k", properties={"price": 1})
    (first,) = client.claim("prices")
    client.nack(first, "boom")
    (again,) = client.claim("prices")
    assert (again.body, dict(again.properties), again.attempts) == (b"v1", {"price": 1}, 2)


def test_a_requeued_dead_letter_gives_way_to_a_newer_pending_value(client, clock):
    client.create_topic("prices", merge="key", max_retries=0)
    client.send("prices", "v1", key="k")
    client.send("prices", "x1", key="x")
    for message in client.claim("prices", count=2):
        assert client.nack(message, "boom") == "dead"
    client.send("prices", "v2", key="k")
    letters = client.dead_letters("prices")
    assert {d.message_id for d in letters} == {rmq.message_id_of("prices", b"k"),
                                               rmq.message_id_of("prices", b"x")}
    assert client.requeue_dead("prices") == 2
    assert sorted(m.body for m in drain(client, "prices")) == [b"v2", b"x1"]


def test_a_newer_value_a_group_s_filter_rejects_withdraws_the_pending_one(client):
    client.create_topic("prices", merge="key")
    client.bind("prices", "eu", where="region = 'eu'")
    client.bind("prices", "all")
    client.send("prices", "v1", key="k", properties={"region": "eu"})
    client.send("prices", "v2", key="k", properties={"region": "us"})
    assert states(client, "prices", "eu")["ready"] == []
    assert states(client, "prices", "all")["ready"] == [b"v2"]
    eu = client.stats("prices").groups["eu"].counters
    assert (eu["sent"], eu["filtered"]) == (1, 1)
    # in one batch, in send order: accepted, withdrawn, accepted again
    client.send_many("prices", [{"body": "b1", "key": "b", "properties": {"region": "eu"}},
                                {"body": "b2", "key": "b", "properties": {"region": "us"}},
                                {"body": "b3", "key": "b", "properties": {"region": "eu"}}])
    assert states(client, "prices", "eu")["ready"] == [b"b3"]
    assert [m.body for m in drain(client, "prices", "eu")] == [b"b3"]


def test_a_commit_merges_by_key(client):
    client.create_topic("prices", merge="key")
    client.send("prices", "v1", key="k")
    with client.transaction("prices") as tx:
        tx.send_many([{"body": "v2", "key": "k"}, {"body": "v3", "key": "k"}])
    assert [m.body for m in drain(client, "prices")] == [b"v3"]


def test_readers_show_the_newest_value_and_the_key_s_message_id(client):
    client.create_topic("prices", merge="key", trace=True)
    client.send("prices", "v1", key="k")
    client.send("prices", "v2", key="k")
    client.send("prices", "w1", key="w")
    client.claim("prices", count=1)  # one of them in flight
    want = {rmq.message_id_of("prices", b"k"), rmq.message_id_of("prices", b"w")}
    assert {(r.body, r.message_id) for r in rows(client, "prices")} == {
        (b"v2", rmq.message_id_of("prices", b"k")), (b"w1", rmq.message_id_of("prices", b"w"))}
    pages = [client.peek("prices", state).rows for state in ("ready", "in_flight")]
    assert {r.body for page in pages for r in page} == {b"v2", b"w1"}
    assert {r.message_id for page in pages for r in page} == want
    (found,) = client.find_messages("prices", key="k")
    assert (found.body, found.message_id) == (b"v2", rmq.message_id_of("prices", b"k"))
    events = [e.event for e in client.trace("prices", key="k")]
    assert events[:2] == ["sent", "merged"]
    assert client.trace("prices", rmq.message_id_of("prices", b"k")) == client.trace(
        "prices", key="k")


def test_merge_is_fixed_at_creation_and_checked(client):
    with pytest.raises(InvalidSetting, match="merge must be"):
        client.create_topic("prices", merge="value")
    client.create_topic("prices", merge="key")
    with pytest.raises(InvalidSetting, match="merge cannot be changed"):
        client.alter_topic("prices", merge="body")
    assert client.topic("prices").settings.merge == "key"
    with pytest.raises(ConflictingOptions, match="merging by key"):
        client.send("prices", "v", key="a", slot_basis="b")
    assert client.send("prices", "v", key="a", slot_basis="a").message_id == (
        rmq.message_id_of("prices", b"a"))


def test_a_key_s_values_run_one_at_a_time_on_a_serial_topic(client):
    client.create_topic("prices", merge="key", serial_keys=True)
    client.send("prices", "v1", key="k")
    (running,) = client.claim("prices", count=10)
    client.send("prices", "v2", key="k")
    assert client.claim("prices", count=10) == []  # its key is in flight
    client.ack([running])
    (after,) = client.claim("prices", count=10)
    assert after.body == b"v2"


@pytest.mark.both_deployments
@pytest.mark.both_clients
def test_keys_across_slots_merge_each_in_its_own_slot(client):
    client.create_topic("prices", merge="key", slots=16)
    client.send_many("prices", [{"body": f"{k}-1", "key": f"p{k}"} for k in range(40)])
    counts = client.send_many("prices", [{"body": f"{k}-2", "key": f"p{k}"} for k in range(40)])
    assert counts.merged == 40
    taken = drain(client, "prices")
    assert sorted(m.body for m in taken) == sorted(f"{k}-2".encode() for k in range(40))
    assert {m.message_id for m in taken} == {rmq.message_id_of("prices", f"p{k}".encode())
                                             for k in range(40)}


def test_a_later_delivery_of_a_key_has_a_higher_fencing_token_and_a_value_as_new(client):
    """``Message.fencing_token`` is a fencing token: two deliveries of a key that run side by
    side (a group without supersede), a retry, and a value sent since."""
    client.create_topic("prices", merge="key", slots=1, retry_backoff=0)
    client.send("prices", "price=1", key="p")
    (first,) = client.claim("prices")
    client.send("prices", "price=2", key="p")
    (second,) = client.claim("prices")  # runs beside the first
    assert (first.body, second.body) == (b"price=1", b"price=2")
    assert second.fencing_token > first.fencing_token
    assert client.nack(second, "boom") == "retried"
    client.send("prices", "price=3", key="p")  # merges into the retry: the newest wins
    (third,) = client.claim("prices")
    assert third.body == b"price=3" and third.fencing_token > second.fencing_token
    # a store that refuses a lower version keeps the newest value whatever order they end
    store: dict[bytes, tuple[int, bytes]] = {}
    for done in (third, first):
        if store.get(done.key, (0, b""))[0] < done.fencing_token:
            store[done.key] = (done.fencing_token, done.body)
    assert store == {b"p": (third.fencing_token, b"price=3")}
