"""Key-serial processing (SPEC §3, seed 004): on a ``serial_keys`` topic, messages with the same
key are never processed at once anywhere in the group, and run in send order; different keys
run in parallel."""

from __future__ import annotations

import threading
import time
from collections import defaultdict

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import wait_for

import rmq
from rmq import errors

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]


def bodies(messages: list[rmq.Message]) -> list[bytes]:
    return [m.body for m in messages]


def test_a_key_in_flight_holds_back_its_later_messages_until_acked(client):
    client.create_topic("t", serial_keys=True)
    client.send_many("t", [{"body": f"k1-{i}", "key": "k1"} for i in range(3)])
    first = client.claim("t", count=10)
    assert bodies(first) == [b"k1-0"]
    assert client.claim("t", count=10) == []
    client.ack(first)
    assert bodies(client.claim("t", count=10)) == [b"k1-1"]


def test_different_keys_are_claimed_together(client):
    client.create_topic("t", serial_keys=True, slots=4)
    for key in ("a", "b", "c"):
        client.send("t", f"{key}-0", key=key)
        client.send("t", f"{key}-1", key=key)
    assert sorted(bodies(client.claim("t", count=10))) == [b"a-0", b"b-0", b"c-0"]


@pytest.mark.both_deployments
def test_one_ack_across_slots_frees_the_keys_of_every_slot_it_settles(client):
    # ack checks once whether any of its slots holds key locks, then frees them slot by slot
    client.create_topic("t", serial_keys=True, slots=8)
    keys = [f"k{i}" for i in range(12)]
    client.send_many("t", [{"body": f"{key}-{n}", "key": key} for n in range(2) for key in keys])
    first = client.claim("t", count=100)
    assert sorted(bodies(first)) == sorted(f"{key}-0".encode() for key in keys)
    assert len({m.slot for m in first}) > 1
    assert client.claim("t", count=100) == []
    assert client.ack(first) == len(keys)
    assert sorted(bodies(client.claim("t", count=100))) == sorted(
        f"{key}-1".encode() for key in keys)


def test_messages_of_one_key_run_in_send_order(client):
    client.create_topic("t", serial_keys=True, slots=8)
    sent = [f"order-{i}".encode() for i in range(12)]
    for body in sent:
        client.send("t", body, key="customer-7")
    seen = []
    while batch := client.claim("t", count=5):
        assert len(batch) == 1
        seen += bodies(batch)
        client.ack(batch)
    assert seen == sent


def test_one_busy_key_does_not_hold_back_other_keys_behind_its_backlog(client):
    client.create_topic("t", serial_keys=True, slots=1)
    client.send_many("t", [{"body": f"hot-{i}", "key": "hot"} for i in range(50)])
    client.send("t", b"cold-0", key="cold")
    assert bodies(client.claim("t", count=1)) == [b"hot-0"]
    assert bodies(client.claim("t", count=1)) == [b"cold-0"]


def test_the_slot_basis_is_the_key_by_default(client):
    client.create_topic("t", serial_keys=True)
    client.send("t", b"a", slot_basis="shop-1")
    client.send("t", b"b", slot_basis="shop-1")
    assert bodies(client.claim("t", count=10)) == [b"a"]


def test_the_body_is_the_key_when_there_is_no_key(client):
    client.create_topic("t", serial_keys=True)
    client.send("t", b"render-9")
    (first,) = client.claim("t")
    assert not client.send("t", b"render-9").merged
    assert client.claim("t") == []
    client.ack(first)
    assert bodies(client.claim("t")) == [b"render-9"]


def test_a_key_decides_the_slot_so_one_keys_messages_share_a_slot(client):
    client.create_topic("t", serial_keys=True, slots=16)
    slots = {client.send("t", f"m{i}", key="k").slot for i in range(10)}
    assert len(slots) == 1


def test_key_and_a_different_slot_basis_conflict_on_a_serial_topic(client):
    client.create_topic("t", serial_keys=True)
    with pytest.raises(errors.ConflictingOptions, match="slot_basis and key must be equal"):
        client.send("t", b"x", key="a", slot_basis="b")
    assert client.stats("t").groups["default"].counters["sent"] == 0
    client.send("t", b"x", key="a", slot_basis="a")


@pytest.mark.parametrize("settle", ["nack", "release", "lease expiry"])
def test_a_key_runs_its_first_message_again_before_the_later_ones_after_it_ends_unacked(
        client, clock, settle):
    client.create_topic("t", serial_keys=True, retry_backoff=0, visibility_timeout=1)
    client.send("t", b"first", key="k")
    client.send("t", b"second", key="k")
    (held,) = client.claim("t", count=10)
    if settle == "nack":
        client.nack(held, "boom")
    elif settle == "release":
        client.release([held])
    else:
        clock.advance(1000)
        client.recover("t")
    assert bodies(client.claim("t", count=10)) == [b"first"]


def test_a_failed_message_holds_its_key_through_the_backoff_and_keeps_send_order(
        client, clock):
    client.create_topic("t", serial_keys=True, slots=1, retry_backoff=1.0)
    client.send_many("t", [{"body": f"k-{i}", "key": "k"} for i in range(3)])
    client.send("t", b"other", key="o")
    first = client.claim("t", count=1)
    assert bodies(first) == [b"k-0"]
    assert client.nack(first[0], "boom") == "retried"
    # k-0 waits out its 1 s backoff; k-1 and k-2 must not overtake it, other keys run
    assert bodies(client.claim("t", count=10)) == [b"other"]
    clock.advance(1000)
    retried = client.claim("t", count=10)
    assert [(m.body, m.attempts) for m in retried] == [(b"k-0", 2)]
    client.ack(retried)
    seen = []
    while batch := client.claim("t", count=10):
        seen += bodies(batch)
        client.ack(batch)
    assert seen == [b"k-1", b"k-2"]


def test_a_retry_hold_left_by_a_topic_that_stopped_being_serial_does_not_block_the_key(
        client, clock):
    client.create_topic("t", serial_keys=True, slots=1, retry_backoff=0)
    client.send("t", b"k-0", key="k")
    (first,) = client.claim("t")
    client.nack(first, "boom")  # held for the retry of k-0
    client.alter_topic("t", serial_keys=False)
    client.ack(client.claim("t", count=10))  # k-0 runs without the lock
    client.alter_topic("t", serial_keys=True)
    client.send("t", b"k-1", key="k")
    assert bodies(client.claim("t", count=10)) == [b"k-1"]


def test_locks_span_the_whole_group_and_not_other_groups(client, make_client, clock):
    client.create_topic("t", serial_keys=True)
    client.bind("t", "a")
    client.bind("t", "b")
    client.send("t", b"1", key="k")
    client.send("t", b"2", key="k")
    other = make_client(clock=clock)
    assert bodies(client.claim("t", "a")) == [b"1"]
    assert other.claim("t", "a") == []
    assert bodies(other.claim("t", "b")) == [b"1"]


def test_keys_are_never_processed_concurrently_by_competing_consumers(make_client):
    """Three consumers with three workers each; every handler checks no other handler holds
    its key, and records the order each key's messages ran in."""
    setup = make_client()
    setup.create_topic("serial", serial_keys=True, slots=4)
    keys = [f"k{i}" for i in range(5)]
    per_key = 6
    lock = threading.Lock()
    active: dict[bytes, int] = defaultdict(int)
    overlaps: list[bytes] = []
    order: dict[bytes, list[int]] = defaultdict(list)
    peak = [0]

    def handle(message: rmq.Message) -> None:
        with lock:
            active[message.key] += 1
            if active[message.key] > 1:
                overlaps.append(message.key)
            peak[0] = max(peak[0], sum(1 for n in active.values() if n))
            order[message.key].append(int(message.text.split("-")[1]))
        time.sleep(0.003)  # a little work, so that overlapping handlers would be caught
        with lock:
            active[message.key] -= 1

    consumers = [rmq.Consumer(make_client(kind="sync"), "serial", handle, concurrency=3,
                              heartbeat_interval=60) for _ in range(3)]
    for consumer in consumers:
        consumer.start()
    try:
        for i in range(per_key):
            setup.send_many("serial", [{"body": f"{k}-{i}", "key": k} for k in keys])
        wait_for(lambda: sum(len(v) for v in order.values()) >= len(keys) * per_key,
                 what="every message handled")
    finally:
        for consumer in consumers:
            consumer.stop(grace=5)
    assert overlaps == []
    assert {k.decode(): v for k, v in order.items()} == {k: list(range(per_key)) for k in keys}
    assert peak[0] >= 2  # different keys did run at the same time
