"""Claim order (SPEC §3): highest priority first, then earliest due first (FIFO). Priority is
strict across all slots on any deployment; within a priority the order is exact across slots
on a single node, and on a cluster each claim starts at the oldest message of any slot
(docs/semantics.md, ``test_cluster_claims.py``)."""

from __future__ import annotations

import random

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import drain

import rmq


def test_named_priorities_and_the_default(client):
    assert (rmq.Priority.LOW, rmq.Priority.MEDIUM, rmq.Priority.HIGH) == (64, 128, 192)
    client.create_topic("t")
    client.send("t", b"plain")
    (message,) = client.claim("t")
    assert message.priority == rmq.Priority.MEDIUM


def test_higher_priority_is_claimed_first_across_all_slots(client):
    client.create_topic("t", slots=8)
    rng = random.Random(3)
    sent = {f"m{i}".encode(): rng.randint(0, 255) for i in range(60)}
    for body, priority in sent.items():
        client.send("t", body, priority=priority)
    assert len({client.send("t", b, priority=p).slot for b, p in sent.items()}) == 8
    taken = drain(client, "t")
    assert [m.priority for m in taken] == sorted(sent.values(), reverse=True)
    assert {m.body: m.priority for m in taken} == sent


def test_one_claim_returns_its_batch_in_priority_order_across_slots(client):
    client.create_topic("t", slots=8)
    for i in range(40):
        client.send("t", f"m{i}", priority=i * 5)
    batch = client.claim("t", count=10)
    assert [m.priority for m in batch] == [195 - 5 * i for i in range(10)]


@pytest.mark.parametrize("slots", [8, 64])  # above 16 slots a claim reads just the heads
def test_batched_claims_keep_strict_priority_across_many_slots(client, slots):
    client.create_topic("t", slots=slots)
    rng = random.Random(slots)
    sent = {f"m{i}".encode(): rng.choice([0, 64, 128, 192, 255]) for i in range(600)}
    client.send_many("t", [{"body": b, "priority": p} for b, p in sent.items()])
    taken: list[rmq.Message] = []
    batch: list[rmq.Message] = []
    while batch := client.claim("t", count=rng.choice([1, 7, 50, 130]), ack=batch):
        taken += batch
    assert [m.priority for m in taken] == sorted(sent.values(), reverse=True)
    assert sorted(m.body for m in taken) == sorted(sent)


def test_within_a_priority_earlier_sends_are_claimed_first_across_slots(client, clock):
    client.create_topic("t", slots=8)
    bodies = [f"m{i}".encode() for i in range(40)]
    for body in bodies:
        client.send("t", body)
        clock.advance(1)
    assert [m.body for m in drain(client, "t")] == bodies


@pytest.mark.single_node
def test_a_claim_keeps_send_order_when_one_slot_holds_most_of_the_messages(client, clock):
    # A claim reads each slot's even share, then more where a slot's share runs out (in
    # doubling steps, or all it still wants once no other slot has any): claims of every
    # size still come out in exact send order.
    client.create_topic("t", slots=8)
    rng = random.Random(8)
    bodies = [f"m{i}".encode() for i in range(400)]
    slots = []
    for body in bodies:
        slots.append(client.send("t", body, slot_basis="hot" if rng.random() < 0.9 else None).slot)
        clock.advance(1)
    assert len(set(slots)) == 8 and max(map(slots.count, slots)) > 350
    taken: list[rmq.Message] = []
    batch: list[rmq.Message] = []
    while batch := client.claim("t", count=rng.choice([1, 5, 13, 60, 200]), ack=batch):
        taken += batch
    assert [m.body for m in taken] == bodies


def test_within_a_slot_priority_is_strict_then_send_order_on_any_deployment(client):
    client.create_topic("t", slots=4)
    sent = []
    for i in range(30):
        priority = (i * 7) % 3 * 100
        client.send("t", f"m{i}", priority=priority, slot_basis="one-slot")
        sent.append((priority, i))
    taken = drain(client, "t")
    order = sorted(sent, key=lambda pi: (-pi[0], pi[1]))
    assert [m.body for m in taken] == [f"m{i}".encode() for _, i in order]


def test_send_order_holds_for_many_sends_in_the_same_millisecond(client):
    client.create_topic("t", slots=1)
    bodies = [f"m{i:03}".encode() for i in range(100)]  # more than 32 per ms: the clock runs ahead
    client.send_many("t", bodies)
    assert [m.body for m in client.claim("t", count=100)] == bodies


def test_raising_priority_by_merge_moves_a_message_ahead(client):
    client.create_topic("t", slots=1)
    client.send("t", b"first")
    client.send("t", b"second")
    client.send("t", b"second", priority=rmq.Priority.HIGH)
    assert [m.body for m in drain(client, "t")] == [b"second", b"first"]


def test_promoted_delayed_message_keeps_its_due_time_place(client, clock):
    client.create_topic("t", slots=1)
    client.send("t", b"due-earlier", delay_ms=100)
    clock.advance(1000)
    client.send("t", b"sent-later")
    taken = drain(client, "t")
    assert [m.body for m in taken] == [b"due-earlier", b"sent-later"]
    assert taken[0].due_at == taken[1].due_at - 900


def test_lower_priority_waits_while_higher_priority_keeps_arriving(client):
    client.create_topic("t", slots=2)
    client.send("t", b"low", priority=rmq.Priority.LOW, slot_basis="a")
    for i in range(5):
        client.send("t", f"high-{i}", priority=rmq.Priority.HIGH, slot_basis="a")
        batch = client.claim("t", count=1)
        assert [m.body for m in batch] == [f"high-{i}".encode()]
        client.ack(batch)
    assert [m.body for m in client.claim("t")] == [b"low"]
