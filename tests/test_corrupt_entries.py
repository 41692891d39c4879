"""A stored entry damaged by hand (a pending member, an in-flight or dead record, a pending
value of a topic merging by key, an attempts count) is reported, never raised: ``snapshot``,
``peek`` and ``find_messages`` show it as a row marked ``corrupt`` whose ``error`` is a
:class:`rmq.CorruptMessage`'s text, ``dead_letters`` lists a damaged dead letter so marked,
and ``cancel`` reads past what it cannot decode. Every other message reads as before."""

from __future__ import annotations

import struct

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401

import rmq
from rmq.errors import UnknownMessage
from rmq.storage.codec import EXTENDED_PREFIX
from rmq.storage.keys import SlotKeys

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]

# a member no send writes: a property of an unknown kind ("x")
_PROPERTY = b"\x01nx" + struct.pack(">I", 1) + b"1"
BAD_MEMBER = EXTENDED_PREFIX + b"\x04" + struct.pack(">I", len(_PROPERTY)) + _PROPERTY + b"body"
BAD_RECORD = b"not a record"


def _keys(topic: str, slot: int = 0, group: str = "default"):
    return SlotKeys(topic, slot).group(group)


def _damage_ready(client, topic: str) -> None:
    ready = _keys(topic).ready
    ((_, score),) = client.redis.zrange(ready, -1, -1, withscores=True)
    client.redis.zadd(ready, {BAD_MEMBER: score + 1})


def _damage_delayed(client, topic: str) -> None:
    client.send(topic, b"later", delay_ms=60_000)
    delayed = _keys(topic).delayed
    ((_, score),) = client.redis.zrange(delayed, 0, 0, withscores=True)
    client.redis.zadd(delayed, {BAD_MEMBER: score})


def _damage_in_flight(client, topic: str, record: bytes) -> str:
    (message,) = client.claim(topic, count=1)
    client.redis.hset(_keys(topic).inflight, str(message.seq), record)
    return message.id


def _damage_dead(client, topic: str) -> None:
    (message,) = client.claim(topic, count=1)
    client.nack(message, "no")
    (seq,) = client.redis.hkeys(_keys(topic).dead)
    client.redis.hset(_keys(topic).dead, seq, BAD_RECORD)


def _topic(client, **settings) -> None:
    client.create_topic("t", slots=1, max_retries=0, **settings)
    client.send_many("t", [b"good-1", b"good-2"])


def _good_bodies(rows) -> list[bytes]:
    return sorted(r.body for r in rows if not r.corrupt)


def _assert_corrupt(row, state: str, stored: bytes, names: str, damaged: bytes = b"") -> None:
    """``row`` is ``stored``, in ``state``, marked corrupt, its error naming the damaged part
    and quoting its bytes (``damaged``, by default ``stored``)."""
    assert (row.state, row.slot, row.corrupt, row.body) == (state, 0, True, stored)
    assert row.error.startswith(f"cannot decode the stored {names} ")
    assert repr((damaged or stored)[:16])[2:-1] in row.error


def test_a_damaged_ready_member_shows_as_a_corrupt_row_in_every_reader(client):
    _topic(client)
    _damage_ready(client, "t")
    rows = list(client.snapshot("t"))
    assert _good_bodies(rows) == [b"good-1", b"good-2"]
    (bad,) = [r for r in rows if r.corrupt]
    _assert_corrupt(bad, "ready", BAD_MEMBER, "ready message")
    assert "KeyError" in bad.error
    assert bad.message_id == rmq.message_id_of("t", BAD_MEMBER)
    page = client.peek("t", "ready")
    assert page.total == 3 and [r.corrupt for r in page.rows] == [False, False, True]
    _assert_corrupt(page.rows[2], "ready", BAD_MEMBER, "ready message")
    found = client.find_messages("t", b"good-1", every_slot=True)
    assert [(r.body, r.corrupt) for r in found] == [(b"good-1", False), (BAD_MEMBER, True)]
    # and a claim still dead-letters it, as before
    assert sorted(m.body for m in client.claim("t", count=10)) == [b"good-1", b"good-2"]


def test_a_damaged_delayed_member_shows_as_a_corrupt_row(client):
    _topic(client)
    _damage_delayed(client, "t")
    (bad,) = [r for r in client.snapshot("t") if r.corrupt]
    _assert_corrupt(bad, "delayed", BAD_MEMBER, "delayed message")
    rows = client.peek("t", "delayed").rows
    assert sorted((r.corrupt, r.body) for r in rows) == [(False, b"later"), (True, BAD_MEMBER)]
    found = client.find_messages("t", b"later", every_slot=True)
    assert sorted((r.corrupt, r.body) for r in found) == [(False, b"later"), (True, BAD_MEMBER)]


@pytest.mark.parametrize("record,names", [
    (BAD_RECORD, "in-flight record"),
    (b"128,1,1700000000000," + BAD_MEMBER, "in-flight message"),
], ids=["record", "member"])
def test_a_damaged_in_flight_record_shows_as_a_corrupt_row_with_its_delivery_id(
        client, record, names):
    _topic(client)
    delivery = _damage_in_flight(client, "t", record)
    shown = BAD_MEMBER if names == "in-flight message" else BAD_RECORD
    (bad,) = [r for r in client.snapshot("t") if r.corrupt]
    _assert_corrupt(bad, "in_flight", shown, names)
    assert bad.id == delivery and bad.lease_until is not None
    (paged,) = client.peek("t", "in_flight").rows
    assert paged == bad
    assert [r.corrupt for r in client.find_messages("t", b"good-2", every_slot=True)] == [
        False, True]
    # cancel reads past it: the good pending message is cancelled
    (pending,) = [r for r in client.snapshot("t") if r.state == "ready"]
    assert client.cancel("t", pending.message_id) == (1, 0)


def test_cancel_of_a_message_no_group_holds_says_so_past_a_damaged_record(client):
    _topic(client)
    _damage_in_flight(client, "t", BAD_RECORD)
    with pytest.raises(UnknownMessage, match="1 stored entry could not be decoded"):
        client.cancel("t", "0123456789abcdef")


def test_a_damaged_dead_record_is_listed_as_a_corrupt_dead_letter(client):
    _topic(client)
    _damage_dead(client, "t")
    (letter,) = client.dead_letters("t")
    assert (letter.body, letter.corrupt) == (BAD_RECORD, True)
    assert letter.error.startswith("cannot decode the stored dead record")
    assert letter.id.startswith("0-")
    (bad,) = [r for r in client.snapshot("t") if r.state == "dead"]
    _assert_corrupt(bad, "dead", BAD_RECORD, "dead record")
    assert bad.id == letter.id
    (paged,) = client.peek("t", "dead").rows
    assert paged == bad
    assert [r.corrupt for r in client.find_messages("t", b"good-2")] == [False, True]
    assert client.purge_dead("t") == 1


def test_requeue_leaves_a_damaged_dead_record_dead_and_requeues_the_others(client):
    _topic(client)
    _damage_dead(client, "t")
    (message,) = client.claim("t", count=1)
    client.nack(message, "no")
    assert client.requeue_dead("t") == 1
    assert [(r.state, r.body, r.corrupt) for r in client.snapshot("t")] == [
        ("ready", b"good-2", False), ("dead", BAD_RECORD, True)]


def test_a_damaged_pending_value_of_a_topic_merging_by_key_shows_as_a_corrupt_row(client):
    _topic(client, merge="key")
    client.send("t", b"v1", key=b"k")
    client.redis.hset(_keys("t").values, b"k", BAD_MEMBER)
    (bad,) = [r for r in client.snapshot("t") if r.corrupt]
    _assert_corrupt(bad, "ready", BAD_MEMBER, "pending value")
    assert bad.message_id == rmq.message_id_of("t", b"k")
    assert [r.corrupt for r in client.peek("t", "ready").rows] == [False, False, True]
    assert [r.corrupt for r in client.find_messages("t", key=b"k")] == [True]
    assert client.cancel("t", bad.message_id) == (1, 0)


def test_a_damaged_attempts_count_shows_the_message_as_a_corrupt_row(client):
    _topic(client)
    client.redis.hset(_keys("t").attempts, b"good-1", b"many")
    (bad,) = [r for r in client.snapshot("t") if r.corrupt]
    _assert_corrupt(bad, "ready", b"good-1", "attempts count", b"many")
    assert [r.corrupt for r in client.peek("t", "ready").rows] == [True, False]
    assert client.find_messages("t", b"good-1")[0].corrupt


def test_a_damaged_lease_leaves_its_deliveries_without_a_lease(client):
    _topic(client)
    (message,) = client.claim("t", count=1)
    client.redis.zadd(_keys("t").leases, {b"x:y": -1})
    (row,) = client.peek("t", "in_flight").rows
    assert (row.id, row.corrupt) == (message.id, False)
    assert [r.state for r in client.snapshot("t")] == ["ready", "in_flight"]


@pytest.mark.both_clients
def test_both_clients_snapshot_a_damaged_member_as_a_corrupt_row(client):
    _topic(client)
    _damage_ready(client, "t")
    assert [r.corrupt for r in client.snapshot("t")] == [False, False, True]
    assert [r.corrupt for r in client.peek("t", "ready").rows] == [False, False, True]
