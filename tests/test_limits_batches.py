"""A group's limit in batches (SPEC §15, docs/limits.md "Batches"): ``max_batches=N`` holds the
group to N claims in flight across the fleet, a claim (a batch consumer's batch, a
``claim(count)``) taking one unit whatever its count and holding it while any message it took
is in flight."""

from __future__ import annotations

import threading

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import wait_for

import rmq
from rmq import errors

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]


def _send(client, topic, n, prefix="m"):
    client.send_many(topic, [f"{prefix}{i}" for i in range(n)])


@pytest.mark.both_clients
def test_max_batches_is_stored_kept_when_left_out_and_removed_by_none(client):
    client.create_topic("renders")
    stored = client.set_limits("renders", max_batches=4)
    assert stored == rmq.GroupLimits(max_batches=4)
    assert client.set_limits("renders", max_in_flight=128) == rmq.GroupLimits(128, None, 4)
    assert client.limits("renders") == rmq.GroupLimits(128, None, 4)
    assert client.set_limits("renders", max_batches=None) == rmq.GroupLimits(128)
    assert client.stats("renders").groups["default"].limits == rmq.GroupLimits(128)


@pytest.mark.parametrize("value", [0, 1_000_001, 2.5, "4", True])
def test_a_bad_max_batches_raises_invalid_argument_and_writes_nothing(client, value):
    client.create_topic("renders")
    with pytest.raises(errors.InvalidArgument, match="max_batches"):
        client.set_limits("renders", max_batches=value)
    assert client.limits("renders") == rmq.GroupLimits()


def test_limits_without_max_batches_are_stored_as_clients_before_it_read_them(client):
    client.create_topic("renders")
    client.set_limits("renders", max_in_flight=4)
    assert rmq.GroupLimits(4).to_json() == '{"max_in_flight":4,"rate":null}'
    assert rmq.GroupLimits.from_json('{"max_in_flight":4,"rate":null}') == rmq.GroupLimits(4)
    assert rmq.GroupLimits.from_json(rmq.GroupLimits(None, None, 3).to_json()).max_batches == 3


@pytest.mark.both_deployments
def test_a_claim_takes_one_unit_whatever_its_count(client):
    client.create_topic("renders", slots=4)
    _send(client, "renders", 40)
    client.set_limits("renders", max_batches=2)
    first = client.claim("renders", count=10)
    second = client.claim("renders", count=10)
    assert (len(first), len(second)) == (10, 10)
    assert client.claim("renders", count=10) == []
    assert client.claim("renders", count=1) == []
    assert client.stats("renders").groups["default"].ready == 20  # held back: still pending


@pytest.mark.both_deployments
def test_a_claim_holds_its_unit_while_any_message_it_took_is_in_flight(client):
    client.create_topic("renders", slots=4, retry_backoff=0)
    _send(client, "renders", 30)
    client.set_limits("renders", max_batches=1)
    batch = client.claim("renders", count=10)
    client.ack(batch[:8])
    client.nack(batch[8], "one bad frame")
    assert client.claim("renders", count=10) == []  # batch[9] is still in flight
    client.release([batch[9]])
    assert len(client.claim("renders", count=10)) == 10


@pytest.mark.both_deployments
def test_a_claims_unit_returns_when_its_leases_expire_and_stays_while_they_are_extended(
        client, clock):
    client.create_topic("renders", slots=2, visibility_timeout=5)
    _send(client, "renders", 20)
    client.set_limits("renders", max_batches=1)
    held = client.claim("renders", count=5)
    clock.advance(4_000)
    assert all(client.extend(held, 10))
    clock.advance(4_000)  # past the first lease, inside the extended one
    assert client.claim("renders", count=5) == []
    clock.advance(6_001)  # the extended leases ran out: the claim is over
    assert len(client.claim("renders", count=5)) == 5


@pytest.mark.both_deployments
def test_stats_count_the_claims_in_flight_under_max_batches(client, clock):
    client.create_topic("renders", slots=4, visibility_timeout=5)
    _send(client, "renders", 30)
    assert client.stats("renders").groups["default"].batches_in_use is None  # no max_batches
    client.set_limits("renders", max_batches=3)
    first = client.claim("renders", count=10)
    second = client.claim("renders", count=10)
    assert client.stats("renders").groups["default"].batches_in_use == 2
    client.ack(first[:9])
    assert client.stats("renders").groups["default"].batches_in_use == 2  # first[9] runs
    client.ack(first[9:])
    assert client.stats("renders").groups["default"].batches_in_use == 1
    clock.advance(5_001)  # second's leases ran out: its claim is over
    assert client.stats("renders").groups["default"].batches_in_use == 0
    assert len(second) == 10


@pytest.mark.both_deployments
def test_max_batches_and_max_in_flight_hold_together(client):
    client.create_topic("renders", slots=2)
    _send(client, "renders", 40)
    client.set_limits("renders", max_in_flight=12, max_batches=3)
    assert len(client.claim("renders", count=8)) == 8
    assert len(client.claim("renders", count=8)) == 4  # max_in_flight: 12 messages
    assert client.claim("renders", count=8) == []
    client.set_limits("renders", max_in_flight=None)
    assert len(client.claim("renders", count=8)) == 8  # the third claim
    assert client.claim("renders", count=8) == []  # max_batches: 3 claims


@pytest.mark.both_deployments
def test_a_claim_at_the_batch_limit_waits_until_an_ack_frees_its_unit(make_client):
    holder, waiter = make_client(), make_client()
    holder.create_topic("renders")
    _send(holder, "renders", 6)
    holder.set_limits("renders", max_batches=1)
    held = holder.claim("renders", count=3)
    got: list[rmq.Message] = []
    waiting = threading.Thread(target=lambda: got.extend(waiter.claim("renders", count=3,
                                                                       wait=20)))
    waiting.start()
    wait_for(lambda: holder.stats("renders").groups["default"].in_flight == 3,
             what="the first claim in flight")
    holder.ack(held)
    waiting.join(10)
    assert len(got) == 3


# -- batch consumers under max_batches -----------------------------------------------------


@pytest.mark.both_deployments
def test_batch_consumers_of_a_fleet_run_at_most_max_batches_batches_at_once(make_client):
    producer = make_client()
    producer.create_topic("renders", slots=4)
    producer.set_limits("renders", max_batches=2)
    _send(producer, "renders", 120)
    running, most, lock = [0], [0], threading.Lock()
    sizes: list[int] = []

    def render(messages: list[rmq.Message]) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            sizes.append(len(messages))
        threading.Event().wait(0.02)  # a render's length, not a synchronisation
        with lock:
            running[0] -= 1

    consumers = [rmq.Consumer(make_client(), "renders", render, batch=8, concurrency=2,
                              heartbeat_interval=60).start() for _ in range(3)]
    try:
        wait_for(lambda: sum(c.handled for c in consumers) == 120, timeout=30,
                 what="120 handled")
    finally:
        for consumer in consumers:
            consumer.stop(grace=1)
    assert most[0] <= 2
    assert sum(sizes) == 120 and max(sizes) == 8
    assert producer.stats("renders").groups["default"].in_flight == 0


def test_a_batch_consumer_of_a_group_with_max_batches_holds_no_batch_beyond_its_workers(
        make_client):
    producer = make_client()
    producer.create_topic("renders")
    producer.set_limits("renders", max_batches=5)
    _send(producer, "renders", 40)
    gate = threading.Event()

    def render(messages: list[rmq.Message]) -> None:
        assert gate.wait(10)

    consumer = rmq.Consumer(make_client(), "renders", render, batch=4, concurrency=2,
                            heartbeat_interval=60).start()
    try:
        wait_for(lambda: consumer.held == 8, what="two batches held")
        assert consumer.prefetch == 8  # one per worker: none held waiting for a worker
        assert producer.stats("renders").groups["default"].in_flight == 8
    finally:
        gate.set()
        consumer.stop(grace=1)
