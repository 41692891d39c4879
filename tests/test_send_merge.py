"""Sending and merging (SPEC §2): identical pending bodies merge, keeping the earliest due time
and the highest priority; a body in flight never absorbs a send."""

from __future__ import annotations

import itertools
import random
import zlib

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import drain, rows, states
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import rmq

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]


def counters(client: rmq.Client, topic: str, group: str = "default") -> dict[str, int]:
    return client.stats(topic).groups[group].counters


def test_identical_pending_bodies_merge_into_one_message(client):
    client.create_topic("t")
    first = client.send("t", b"product-1")
    second = client.send("t", b"product-1")
    assert (first.merged, second.merged) == (False, True)
    assert first.slot == second.slot
    assert states(client, "t")["ready"] == [b"product-1"]
    assert counters(client, "t") == {"sent": 2, "merged": 1, "filtered": 0, "acked": 0,
                                     "retried": 0, "dead": 0, "superseded": 0,
                                     "cancelled": 0, "outdated": 0}


def test_merged_message_is_delivered_once(client):
    client.create_topic("t")
    for _ in range(5):
        client.send("t", "same")
    taken = drain(client, "t")
    assert [m.body for m in taken] == [b"same"]


def test_different_bodies_do_not_merge(client):
    client.create_topic("t")
    assert not client.send("t", b"a").merged
    assert not client.send("t", b"b").merged
    assert states(client, "t")["ready"] == [b"a", b"b"]


def test_str_body_is_stored_as_utf8_and_merges_with_the_same_bytes(client):
    client.create_topic("t")
    client.send("t", "prix: 12 €")
    assert client.send("t", "prix: 12 €".encode()).merged
    (message,) = client.claim("t")
    assert message.body == "prix: 12 €".encode()
    assert message.text == "prix: 12 €"


def test_empty_body_and_body_starting_with_nul_round_trip(client):
    client.create_topic("t")
    client.send("t", b"")
    client.send("t", b"\x00\x01binary")
    assert client.send("t", b"\x00\x01binary").merged
    assert sorted(m.body for m in drain(client, "t")) == [b"", b"\x00\x01binary"]


def test_merge_keeps_the_highest_priority(client):
    client.create_topic("t")
    client.send("t", b"x", priority=10)
    client.send("t", b"x", priority=200)
    client.send("t", b"x", priority=50)
    (row,) = rows(client, "t")
    assert (row.state, row.priority) == ("ready", 200)


def test_merge_into_delayed_keeps_the_earliest_due_time(client, clock):
    client.create_topic("t")
    now = clock()
    client.send("t", b"late-first", delay_ms=5000)
    assert client.send("t", b"late-first", delay_ms=1000).merged
    client.send("t", b"early-first", delay_ms=1000)
    assert client.send("t", b"early-first", delay_ms=5000).merged
    due = {r.body: r.due_at for r in rows(client, "t")}
    assert due == {b"late-first": now + 1000, b"early-first": now + 1000}


def test_duplicates_inside_the_merge_window_keep_the_first_due_time(client, clock):
    client.create_topic("t")
    start = clock()
    client.send("t", b"price", delay_ms=1000)
    clock.advance(600)
    assert client.send("t", b"price", delay_ms=1000).merged
    clock.advance(399)
    assert client.claim("t") == []
    clock.advance(1)
    (message,) = client.claim("t")
    assert (message.body, message.due_at) == (b"price", start + 1000)


def test_ready_send_merging_into_a_delayed_message_makes_it_ready_now(client, clock):
    client.create_topic("t")
    client.send("t", b"x", delay_ms=60_000, priority=10)
    assert client.send("t", b"x", priority=20).merged
    (message,) = client.claim("t")
    assert (message.body, message.priority, message.due_at) == (b"x", 20, clock())


def test_merge_into_delayed_keeps_the_highest_priority_when_it_becomes_due(client, clock):
    client.create_topic("t")
    client.send("t", b"x", delay_ms=100, priority=250)
    client.send("t", b"x", delay_ms=500, priority=3)
    clock.advance(100)
    (message,) = client.claim("t")
    assert message.priority == 250


def test_send_of_in_flight_body_creates_new_pending_message(client):
    client.create_topic("t")
    client.send("t", b"render-42")
    (claimed,) = client.claim("t")
    result = client.send("t", b"render-42")
    assert not result.merged
    assert states(client, "t") == {"ready": [b"render-42"], "delayed": [],
                                   "in_flight": [b"render-42"], "dead": []}
    client.ack(claimed)
    (again,) = client.claim("t")
    assert again.body == b"render-42" and again.attempts == 1


def test_sends_during_processing_merge_with_each_other_but_not_with_the_in_flight_one(client):
    client.create_topic("t")
    client.send("t", b"x")
    client.claim("t")
    assert [client.send("t", b"x").merged for _ in range(3)] == [False, True, True]
    assert states(client, "t")["ready"] == [b"x"]


def test_every_send_is_followed_by_a_processing_that_starts_after_it(client, clock):
    """SPEC §2 invariant, over a random interleaving of sends, claims, acks and nacks."""
    client.create_topic("t", slots=4, retry_backoff=0)
    rng = random.Random(7)
    bodies = [f"b{i}".encode() for i in range(4)]
    step = 0
    last_send: dict[bytes, int] = {}
    starts: dict[bytes, list[int]] = {b: [] for b in bodies}
    held: list[rmq.Message] = []
    for _ in range(300):
        step += 1
        clock.advance(1)
        action = rng.random()
        if action < 0.5:
            body = rng.choice(bodies)
            client.send("t", body, delay_ms=rng.choice([None, None, 3]))
            last_send[body] = step
        elif action < 0.7:
            for message in client.claim("t", count=rng.randint(1, 3)):
                starts[message.body].append(step)
                held.append(message)
        elif held:
            message = held.pop(rng.randrange(len(held)))
            if action < 0.9:
                client.ack(message)
            else:
                client.nack(message, "boom")
    client.ack(held)
    clock.advance(10)
    step += 1
    for message in drain(client, "t"):
        starts[message.body].append(step)
    for body, sent_at in last_send.items():
        assert any(start > sent_at for start in starts[body]), body


def test_json_objects_merge_whatever_their_key_order(client):
    client.create_topic("t")
    client.send("t", json={"sku": 7, "price": 12.5, "tags": ["a"]})
    assert client.send("t", json={"tags": ["a"], "price": 12.5, "sku": 7}).merged
    (message,) = client.claim("t")
    assert message.body == b'{"price":12.5,"sku":7,"tags":["a"]}'
    assert message.json() == {"sku": 7, "price": 12.5, "tags": ["a"]}


def test_json_with_non_ascii_text_is_canonical_utf8(client):
    client.create_topic("t")
    client.send("t", json={"name": "café"})
    (message,) = client.claim("t")
    assert message.body == '{"name":"café"}'.encode()


def test_identical_bodies_share_the_slot_of_their_crc32(client):
    client.create_topic("t", slots=16)
    for i in range(20):
        body = f"body-{i}".encode()
        assert client.send("t", body).slot == zlib.crc32(body) & 15


def test_slot_basis_decides_the_slot_and_bodies_still_merge_per_body(client):
    client.create_topic("t", slots=16)
    expected = zlib.crc32(b"merchant-9") & 15
    slots = {client.send("t", f"item-{i}", slot_basis="merchant-9").slot for i in range(10)}
    assert slots == {expected}
    assert client.send("t", "item-3", slot_basis="merchant-9").merged
    assert client.stats("t").groups["default"].slots[expected].ready == 10


def test_same_body_with_different_keys_are_different_messages(client):
    client.create_topic("t")
    assert not client.send("t", b"refresh", key="user-1").merged
    assert not client.send("t", b"refresh", key="user-2").merged
    assert client.send("t", b"refresh", key="user-1").merged
    keyed = sorted((m.key, m.body) for m in drain(client, "t"))
    assert keyed == [(b"user-1", b"refresh"), (b"user-2", b"refresh")]


def test_a_message_without_key_has_key_none_and_its_slot_basis_as_key_otherwise(client):
    client.create_topic("t")
    client.send("t", b"plain")
    client.send("t", b"based", slot_basis="shop-1")
    keys = {m.body: m.key for m in drain(client, "t")}
    assert keys == {b"plain": None, b"based": b"shop-1"}


@pytest.mark.both_deployments
def test_send_many_counts_sent_and_merged(client):
    client.create_topic("t", slots=4)
    counts = client.send_many("t", [b"a", b"b", b"a", "c", b"b", b"a"])
    assert counts == rmq.SendCounts(sent=6, merged=3)
    assert states(client, "t")["ready"] == [b"a", b"b", b"c"]
    assert counters(client, "t")["sent"] == 6


def test_send_many_accepts_option_dicts_like_send(client, clock):
    client.create_topic("t")
    counts = client.send_many("t", [
        {"body": b"urgent", "priority": rmq.Priority.HIGH},
        {"json": {"b": 1, "a": 2}},
        {"body": b"later", "delay_ms": 500},
        {"body": b"keyed", "key": "k1"},
    ])
    assert counts == rmq.SendCounts(4, 0)
    found = {r.body: (r.state, r.priority, r.key) for r in rows(client, "t")}
    assert found == {
        b"urgent": ("ready", 192, None),
        b'{"a":2,"b":1}': ("ready", 128, None),
        b"later": ("delayed", 128, None),
        b"keyed": ("ready", 128, b"k1"),
    }


def test_send_many_merges_with_what_is_already_pending(client):
    client.create_topic("t")
    client.send("t", b"a")
    assert client.send_many("t", [b"a", b"z"]) == rmq.SendCounts(2, 1)


@pytest.mark.both_deployments
def test_send_many_of_a_large_batch_stores_every_distinct_body(client):
    client.create_topic("t", slots=4)
    items = [f"m{i % 700}" for i in range(1500)]
    assert client.send_many("t", items) == rmq.SendCounts(1500, 800)
    assert client.stats("t").groups["default"].ready == 700


def test_a_separate_producer_client_merges_into_the_same_message(client, make_client, clock):
    client.create_topic("t")
    other = make_client(clock=clock)
    client.send("t", b"shared")
    assert other.send("t", b"shared").merged


_SENDS = st.tuples(st.sampled_from([b"a", b"b", b"c"]), st.integers(0, 3),
                   st.sampled_from([None, 5_000, 10_000]))  # body, priority, delay_ms
_topics = itertools.count()


@settings(max_examples=30, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(held=st.lists(_SENDS, max_size=4), sends=st.lists(_SENDS, min_size=2, max_size=8))
def test_a_single_send_stores_what_the_same_send_in_a_batch_stores(client, clock, held, sends):
    """enqueue.lua takes a lone message through put_pending and a batch through
    put_pending_run: the same messages, one send at a time or in one batch at the same
    moment, into the same pending state, leave the same state, counters and claim order."""
    n = next(_topics)
    singly, batched = f"singly{n}", f"batched{n}"
    for topic in (singly, batched):
        client.create_topic(topic, slots=2)
        for group in ("g1", "g2"):
            client.bind(topic, group)
        if held:
            client.send_many(topic, [{"body": b, "priority": p, "delay_ms": d}
                                     for b, p, d in held])
    merged = sum(client.send(singly, b, priority=p, delay_ms=d).merged for b, p, d in sends)
    counts = client.send_many(batched, [{"body": b, "priority": p, "delay_ms": d}
                                        for b, p, d in sends])
    assert merged == counts.merged

    def stored(topic):
        return sorted((r.group, r.state, r.body, r.priority, r.due_at)
                      for r in client.snapshot(topic))

    assert stored(singly) == stored(batched)
    clock.advance(10_000)
    for group in ("g1", "g2"):
        assert counters(client, singly, group) == counters(client, batched, group)
        assert ([(m.body, m.priority) for m in drain(client, singly, group)]
                == [(m.body, m.priority) for m in drain(client, batched, group)])
