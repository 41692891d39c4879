"""A stored message the client cannot decode (written by another program, or damaged) never
strands the batch claimed with it: the claim delivers the others, and the undecodable one
goes to the group's dead letters at once, the decoding problem as its error, counted as
dead-lettered; nothing is left in flight. The worker runtime goes on with the good ones."""

from __future__ import annotations

import struct
import threading

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import wait_for

import rmq
from rmq.storage.codec import EXTENDED_PREFIX
from rmq.storage.keys import SlotKeys

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]

_U32 = struct.Struct(">I")


def _properties(*fields: tuple[bytes, bytes, bytes]) -> bytes:
    """A member's property block, each field (name, kind letter, value text) as stored."""
    raw = b"".join(bytes((len(name),)) + name + kind + _U32.pack(len(text)) + text
                   for name, kind, text in fields)
    return _U32.pack(len(raw)) + raw


# Members no send writes (docs/storage.md, "Members"), each with what its error names.
CORRUPT_MEMBERS = {
    "an int property that is no number": (
        EXTENDED_PREFIX + b"\x04" + _properties((b"n", b"i", b"12abc")) + b"body", "int"),
    "a property of an unknown kind": (
        EXTENDED_PREFIX + b"\x04" + _properties((b"n", b"x", b"1")) + b"body", "'x'"),
    "a tag that is not ASCII": (EXTENDED_PREFIX + b"\x02\x02\xff\xfe" + b"body", "ascii"),
    "a member cut short": (b"\x00\x00\x01", "unpack"),
    "properties longer than the member": (
        EXTENDED_PREFIX + b"\x04" + _U32.pack(64) + b"\x01n", "index"),
}
GOOD = [b"good-%d" % i for i in range(3)]


def _write_corrupt(client, topic: str, slot: int, member: bytes, group: str = "default") -> None:
    """``member`` into the group's ready zset of ``slot``, behind what the slot holds (a
    score past the last one's keeps the heads index of a topic of many slots true)."""
    ready = SlotKeys(topic, slot).group(group).ready
    last = client.redis.zrange(ready, -1, -1, withscores=True)
    client.redis.zadd(ready, {member: (last[0][1] if last else 0) + 1})


def _send_good_and_corrupt(client, topic: str, member: bytes, good: list[bytes] = GOOD) -> int:
    """The ``good`` messages and ``member`` in one slot (their slot basis, ``member`` last);
    returns the slot."""
    sent = [client.send(topic, body, slot_basis="k") for body in good]
    slot = sent[0].slot
    _write_corrupt(client, topic, slot, member)
    return slot


def _assert_dead_lettered(client, topic: str, member: bytes, names: str) -> None:
    (letter,) = client.dead_letters(topic)
    assert letter.body == member  # what it holds, as stored
    assert letter.attempts == 1
    assert "cannot decode" in letter.error and names in letter.error
    group = client.stats(topic).groups["default"]
    assert (group.in_flight, group.ready, group.dead) == (0, 0, 1)
    assert group.counters["dead"] == 1


@pytest.mark.parametrize("how", sorted(CORRUPT_MEMBERS))
@pytest.mark.parametrize("slots", [1, 32], ids=["one-call claim", "heads index claim"])
@pytest.mark.both_deployments
def test_a_claim_delivers_the_good_messages_and_dead_letters_an_undecodable_one(
        client, how, slots):
    member, names = CORRUPT_MEMBERS[how]
    client.create_topic("t", slots=slots)
    _send_good_and_corrupt(client, "t", member)
    claimed = client.claim("t", count=10)
    assert sorted(m.body for m in claimed) == GOOD
    assert client.ack(claimed) == len(GOOD)
    _assert_dead_lettered(client, "t", member, names)
    assert client.claim("t") == []


def test_the_snapshot_and_a_page_of_dead_letters_show_an_undecodable_one_whole(client):
    member, names = CORRUPT_MEMBERS["a property of an unknown kind"]
    client.create_topic("t", slots=1)
    _send_good_and_corrupt(client, "t", member)
    client.ack(client.claim("t", count=10))
    (row,) = client.snapshot("t")
    (paged,) = client.peek("t", "dead").rows
    for shown in (row, paged):
        assert (shown.state, shown.body, shown.key, shown.tag) == ("dead", member, None, None)
        assert names in shown.error


def test_a_requeued_undecodable_message_is_dead_lettered_again_by_its_next_claim(client):
    member, names = CORRUPT_MEMBERS["an int property that is no number"]
    client.create_topic("t", slots=1)
    _send_good_and_corrupt(client, "t", member)
    client.ack(client.claim("t", count=10))
    assert client.requeue_dead("t") == 1
    client.send("t", b"next")
    assert [m.body for m in client.claim("t", count=10)] == [b"next"]
    (letter,) = client.dead_letters("t")
    assert letter.body == member and names in letter.error
    assert client.stats("t").groups["default"].counters["dead"] == 2


def test_an_undecodable_message_is_dead_lettered_on_a_serial_topic_and_frees_its_key(client):
    member, names = CORRUPT_MEMBERS["a member cut short"]
    client.create_topic("t", slots=1, serial_keys=True)
    slot = _send_good_and_corrupt(client, "t", member)
    claimed = client.claim("t", count=10)
    assert [m.body for m in claimed] == GOOD[:1]  # one key, one message at a time
    # only the good one's key is held: the corrupt one, its own key, was let go
    assert client.redis.hkeys(SlotKeys("t", slot).group("default").locks) == [b"k"]
    client.ack(claimed)
    assert [m.body for m in client.claim("t", count=10)] == GOOD[1:2]
    (letter,) = client.dead_letters("t")
    assert letter.body == member and names in letter.error


def test_an_undecodable_message_gives_back_its_unit_of_the_groups_limit(client):
    member, _ = CORRUPT_MEMBERS["an int property that is no number"]
    client.create_topic("t", slots=4)
    client.set_limits("t", max_in_flight=3)
    _send_good_and_corrupt(client, "t", member, GOOD[:2])
    # the limit's 3 units taken by the two good ones and the corrupt one
    assert sorted(m.body for m in client.claim("t", count=10)) == GOOD[:2]
    client.send("t", b"late")
    assert [m.body for m in client.claim("t", count=10)] == [b"late"]
    assert client.stats("t").groups["default"].in_flight == 3


def test_a_claim_with_the_trace_on_dead_lettering_an_undecodable_one_traces_it(client):
    member, _ = CORRUPT_MEMBERS["a tag that is not ASCII"]
    client.create_topic("t", slots=1, trace=True)
    _send_good_and_corrupt(client, "t", member)
    assert sorted(m.body for m in client.claim("t", count=10)) == GOOD
    (letter,) = client.dead_letters("t")
    events = [e.event for e in client.trace("t", letter.message_id)]
    assert events[-2:] == ["failed", "dead"]


def test_a_consumer_handles_the_good_messages_and_keeps_running_past_an_undecodable_one(
        redis_url):
    with rmq.Client(redis_url) as client:
        _consume_past_an_undecodable_one(client)


def _consume_past_an_undecodable_one(client: rmq.Client) -> None:
    member, names = CORRUPT_MEMBERS["a property of an unknown kind"]
    client.create_topic("t", slots=2)
    _send_good_and_corrupt(client, "t", member)
    seen: list[bytes] = []
    lock = threading.Lock()

    def handle(message: rmq.Message) -> None:
        with lock:
            seen.append(message.body)

    consumer = rmq.Consumer(client, "t", handle, heartbeat_interval=60).start()
    try:
        wait_for(lambda: len(seen) == len(GOOD), what="the good messages handled")
        client.send("t", b"after")
        wait_for(lambda: b"after" in seen, what="a message sent afterwards handled")
        wait_for(lambda: client.stats("t").groups["default"].in_flight == 0,
                 what="nothing left in flight")
    finally:
        consumer.stop(grace=1)
    assert sorted(seen) == sorted([*GOOD, b"after"])
    _assert_dead_lettered(client, "t", member, names)
