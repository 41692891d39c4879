"""The heads index of a topic of more than 16 slots on a single node (docs/storage.md, "The
heads index"): claims read a window of slots in the index's order and stay exact topic-wide;
every script that puts a message into ready or delayed keeps the index; a topic without one
(created before it existed) is indexed on first use; a periodic rebuild finds a slot the
index lost; delete_topic removes it. Small topics and clusters keep no index.
"""

from __future__ import annotations

import random
import zlib

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401

import rmq
from rmq.storage.keys import HeadsKeys
from rmq.storage.queue import HEADS_MIN_SLOTS, keeps_heads

GROUP = "default"


def heads(topic: str, group: str = GROUP) -> HeadsKeys:
    return HeadsKeys(topic, group)


def entry(client, topic: str, slot: int, kind: str = "ready") -> float | None:
    """The slot's score in the index (``ready`` or ``delayed``), None when it has none."""
    keys = heads(topic)
    score: float | None = client.redis.zscore(getattr(keys, kind), str(slot))
    return score


def redis_ms(client) -> int:
    seconds, micros = client.redis.time()
    return int(seconds) * 1000 + int(micros) // 1000


def test_the_index_is_kept_for_topics_of_more_than_16_slots_on_a_single_node():
    assert not keeps_heads(rmq.TopicSettings(slots=HEADS_MIN_SLOTS), one_call=True)
    assert keeps_heads(rmq.TopicSettings(slots=2 * HEADS_MIN_SLOTS), one_call=True)
    assert not keeps_heads(rmq.TopicSettings(slots=1024), one_call=False)  # a cluster


class Model:
    """Pending messages by body: (priority, due), merged as a send merges."""

    def __init__(self) -> None:
        self.pending: dict[bytes, tuple[int, int]] = {}

    def send(self, body: bytes, priority: int, due: int) -> None:
        held = self.pending.get(body)
        if held is not None:
            priority, due = max(priority, held[0]), min(due, held[1])
        self.pending[body] = (priority, due)

    def check_claim(self, batch: list[rmq.Message], count: int, now: int) -> None:
        """The batch is the best `count` due messages, best first: by priority, then due
        millisecond (the order promised across slots)."""
        due = {b: v for b, v in self.pending.items() if v[1] <= now}
        assert len(batch) == min(count, len(due))
        keys = []
        for m in batch:
            priority, when = due.pop(m.body)
            assert (m.priority, m.due_at) == (priority, when), m
            keys.append((-priority, when))
            del self.pending[m.body]
        assert keys == sorted(keys)
        if keys and due:
            assert keys[-1] <= min((-p, d) for p, d in due.values())


@pytest.mark.single_node
@pytest.mark.parametrize("slots", [64, 256])
def test_claims_are_exact_across_many_slots_with_priorities_delays_and_merges(
        client, clock, slots):
    """Priorities, delayed messages falling due between claims, and merges that raise a
    pending message's priority or move its due time earlier: each claim (of 1 to 50) takes
    exactly the best due messages, though it starts from a window of a few slots."""
    client.create_topic("t", slots=slots)
    rng = random.Random(slots)
    model = Model()
    bodies = [f"m{i}".encode() for i in range(240)]
    sent_slots = set()
    for n, body in enumerate(bodies):
        if n % 10 == 0:
            clock.advance(1)  # at most a few sends a millisecond per slot
        priority = rng.choice([0, 64, 128, 128, 192, 255])
        delay = rng.choice([0, 0, 0, 5, 40, 200])
        sent_slots.add(client.send("t", body, priority=priority, delay_ms=delay or None).slot)
        model.send(body, priority, clock() + delay)
    assert len(sent_slots) > min(slots, 240) // 2
    for body in rng.sample(bodies, 60):  # merges: a higher priority, an earlier due time
        priority = rng.choice([64, 192, 255])
        delay = rng.choice([0, 3])
        client.send("t", body, priority=priority, delay_ms=delay or None)
        model.send(body, priority, clock() + delay)
    counts = [1, 3, 7, 50]
    for n in range(200):
        if not model.pending:
            break
        clock.advance(rng.choice([0, 1, 4, 20]))
        count = counts[n % len(counts)]
        batch = client.claim("t", count=count)
        model.check_claim(batch, count, clock())
        client.ack(batch)
    assert not model.pending


@pytest.mark.single_node
@pytest.mark.parametrize("how", ["fail", "release", "recover", "requeue_dead"])
def test_messages_given_back_put_their_slot_back_into_the_index(client, clock, how):
    """A claim empties a slot and its index entry goes; a retry (ready at once, or after a
    backoff: then in the delayed index), a release, a recovered lease and a requeued dead
    letter each bring the entry back, and the next claim finds the message."""
    backoff = 0.05 if how == "recover" else 0
    client.create_topic("t", slots=64, max_retries=0 if how == "requeue_dead" else 3,
                        retry_backoff=backoff, visibility_timeout=1)
    slot = client.send("t", b"only").slot
    assert entry(client, "t", slot) is not None
    (message,) = client.claim("t", count=10)
    assert entry(client, "t", slot) is None
    if how == "fail":
        assert client.nack(message, "boom") == "retried"
    elif how == "release":
        assert client.release([message]) == 1
    elif how == "recover":
        clock.advance(1001)
        assert client.recover("t") == 1
        assert entry(client, "t", slot) is None  # after the backoff: delayed
        assert entry(client, "t", slot, "delayed") == clock() + 50
        clock.advance(50)
    else:
        assert client.nack(message, "boom") == "dead"
        assert entry(client, "t", slot) is None
        assert client.requeue_dead("t") == 1
    if how != "recover":
        assert entry(client, "t", slot) is not None
    (again,) = client.claim("t", count=10)
    assert (again.body, again.slot) == (b"only", slot)


@pytest.mark.single_node
def test_a_retry_after_a_backoff_is_claimed_from_a_slot_outside_the_window(client, clock):
    """The delayed index names a due slot the window does not hold: the claim asks for it."""
    client.create_topic("t", slots=1024, retry_backoff=0.02)
    sent = {client.send("t", f"m{i}".encode()).slot: f"m{i}".encode() for i in range(40)}
    high = max(sent)
    assert high > 100  # beyond a claim's first window (count + 8 slots from slot 0)
    taken = client.claim("t", count=40)
    failed = next(m for m in taken if m.slot == high)
    client.ack([m for m in taken if m is not failed])
    assert client.nack(failed, "later") == "retried"
    assert entry(client, "t", high, "delayed") == clock() + 20
    assert client.claim("t", count=1) == []
    clock.advance(20)
    (again,) = client.claim("t", count=1)
    assert (again.slot, again.body, again.attempts) == (high, failed.body, 2)


@pytest.mark.single_node
def test_a_topic_with_messages_and_no_index_is_indexed_and_claimed_completely(client, clock):
    """A topic created before the index: its data and no index keys. The first claim builds
    the index from every slot, and every message comes out, in order."""
    client.create_topic("t", slots=128)
    sent = {}
    for i in range(300):
        priority = (i * 37) % 256
        client.send("t", f"m{i}", priority=priority)
        sent[f"m{i}".encode()] = priority
    client.send("t", b"later", delay_ms=100)
    client.redis.delete(*heads("t").all())
    taken = []
    while batch := client.claim("t", count=25):
        taken += batch
        client.ack(batch)
    assert [m.priority for m in taken] == sorted(sent.values(), reverse=True)
    assert {m.body: m.priority for m in taken} == sent
    assert entry(client, "t", client.send("t", b"later").slot, "delayed") is not None
    clock.advance(100)
    assert [m.body for m in client.claim("t")] == [b"later"]


@pytest.mark.single_node
def test_the_periodic_rebuild_finds_a_slot_the_index_lost(client):
    """An index bug (here: an entry removed by hand) would hide a slot's messages from the
    claims; the index is rebuilt from every slot when its last build is 5 s old by Redis's
    clock, so the slot waits at most that long."""
    client.create_topic("t", slots=64)
    others = {client.send("t", f"m{i}".encode()).slot for i in range(40)}
    assert client.claim("t", count=1)  # builds the index (a fresh topic has none yet)
    body = next(b for b in (f"lost{i}".encode() for i in range(1000))
                if zlib.crc32(b) & 63 not in others)  # alone in its slot
    lost = client.send("t", body).slot
    client.redis.zrem(heads("t").ready, str(lost))
    taken = client.claim("t", count=100)
    assert len(taken) == 39 and body not in {m.body for m in taken}  # built just now
    assert client.claim("t", count=100) == []
    client.redis.set(heads("t").synced, redis_ms(client) - 5000)  # built 5 s ago
    (found,) = client.claim("t", count=100)
    assert (found.body, found.slot) == (body, lost)
    assert int(client.redis.get(heads("t").synced)) >= redis_ms(client) - 1000


@pytest.mark.single_node
def test_delete_topic_removes_the_index_of_every_group(client):
    client.create_topic("t", slots=64)
    client.bind("t", "a")
    client.bind("t", "b")
    for i in range(20):
        client.send("t", f"m{i}")
    client.send("t", b"later", delay_ms=1000)
    for group in ("a", "b"):
        client.claim("t", group, count=5)
    for group in ("a", "b"):
        assert client.redis.exists(*heads("t", group).all()) == 3
    client.unbind("t", "b")  # an unbound group's data goes with the topic too
    client.delete_topic("t")
    assert client.redis.keys("rmq:{t}*") == []
    assert client.redis.keys("*heads*") == []


def test_small_topics_and_clusters_keep_no_index(client):
    """A topic of 16 slots claims over every slot as before; on a cluster a topic of any
    size claims through the slots' heads (cluster_claim.py), with no index."""
    client.create_topic("small", slots=16)
    client.create_topic("big", slots=64)
    for topic in ("small", "big"):
        client.send(topic, b"x", delay_ms=5)
        client.send(topic, b"y")
        assert [m.body for m in client.claim(topic)] == [b"y"]
    assert client.redis.exists(*heads("small").all()) == 0
    indexed = client.redis.exists(*heads("big").all())
    assert indexed == (0 if client.is_cluster else 2)  # ready emptied: delayed, synced


@pytest.mark.single_node
def test_a_serial_topic_claims_through_the_index_and_waits_for_a_key_in_flight(client):
    """On a key-serial topic a slot whose ready messages all wait for a key in flight keeps
    its entry (the claim sets it to the slot's ready head), so the message comes out once
    the key is acknowledged, though acks do not touch the index."""
    client.create_topic("t", slots=64, serial_keys=True)
    first = client.send("t", b"one", key=b"k1")
    assert client.send("t", b"two", key=b"k1").slot == first.slot
    client.send("t", b"other", key=b"k2")
    taken = client.claim("t", count=10)
    assert sorted(m.body for m in taken) == [b"one", b"other"]
    assert client.claim("t", count=10) == []
    assert entry(client, "t", first.slot) is not None
    client.ack([m for m in taken if m.body == b"one"])
    assert [m.body for m in client.claim("t", count=10)] == [b"two"]
