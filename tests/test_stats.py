"""``stats(topic)`` (SPEC §4): per group and per slot, the sizes by state (ready by priority),
the oldest ready age, and the counters sent, merged, acked, retried, dead."""

from __future__ import annotations

import json

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import wait_for

import rmq
from rmq.storage.handler_times import BOUNDS, HandlerTimes
from rmq.storage.registry import ConsumerState

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]


def test_an_empty_topic_has_zero_everything(client):
    client.create_topic("t", slots=4)
    stats = client.stats("t")
    group = stats.groups["default"]
    assert (stats.topic, stats.paused, list(stats.groups)) == ("t", False, ["default"])
    assert (group.delayed, group.ready, group.in_flight, group.dead, group.pending) == (
        0, 0, 0, 0, 0)
    assert group.counters == {"sent": 0, "merged": 0, "filtered": 0, "acked": 0, "retried": 0,
                              "dead": 0, "superseded": 0, "cancelled": 0, "outdated": 0}
    assert [s.slot for s in group.slots] == [0, 1, 2, 3]
    assert group.oldest_ready_ms == 0


@pytest.mark.both_deployments
@pytest.mark.both_clients
def test_sizes_by_state_and_ready_by_priority(client, clock):
    client.create_topic("t", slots=1, max_retries=0)
    client.send_many("t", [
        {"body": b"h1", "priority": 200}, {"body": b"h2", "priority": 200},
        {"body": b"m1"}, {"body": b"l1", "priority": 3},
        {"body": b"claimed", "priority": 255}, {"body": b"dies", "priority": 254},
        {"body": b"later", "delay_ms": 1000},
    ])
    claimed, dies = client.claim("t", count=2)
    client.nack(dies, "x")
    group = client.stats("t").groups["default"]
    assert (group.ready, group.delayed, group.in_flight, group.dead) == (4, 1, 1, 1)
    assert group.ready_by_priority == {200: 2, 128: 1, 3: 1}
    assert list(group.ready_by_priority) == [200, 128, 3]
    assert group.pending == 5


@pytest.mark.both_deployments
def test_slot_stats_add_up_to_the_group(client):
    client.create_topic("t", slots=8)
    results = [client.send("t", f"m{i}") for i in range(30)]
    group = client.stats("t").groups["default"]
    per_slot = {s.slot: s.ready for s in group.slots}
    for slot in range(8):
        assert per_slot[slot] == sum(1 for r in results if r.slot == slot)
    assert sum(s.counters["sent"] for s in group.slots) == group.counters["sent"] == 30


def test_counters_count_sent_merged_acked_retried_and_dead(client):
    client.create_topic("t", max_retries=1, retry_backoff=0, slots=1)
    client.send_many("t", [b"ok", b"ok", b"bad", b"ok"])
    ok, bad = client.claim("t", count=2)
    client.ack(ok)
    client.nack(bad, "x")
    client.nack(client.claim("t")[0], "x")
    assert client.stats("t").groups["default"].counters == {
        "sent": 4, "merged": 2, "filtered": 0, "acked": 1, "retried": 1, "dead": 1,
        "superseded": 0, "cancelled": 0, "outdated": 0}


def test_oldest_ready_age_follows_the_clock(client, clock):
    client.create_topic("t", slots=2)
    client.send("t", b"old")
    clock.advance(1500)
    client.send("t", b"young")
    clock.advance(500)
    group = client.stats("t").groups["default"]
    assert group.oldest_ready_ms == 2000
    assert max(s.oldest_ready_ms for s in group.slots) == 2000


def test_a_delayed_message_counts_as_ready_once_due(client, clock):
    client.create_topic("t")
    client.send("t", b"x", delay_ms=100)
    assert client.stats("t").groups["default"].delayed == 1
    clock.advance(100)
    group = client.stats("t").groups["default"]
    assert (group.delayed, group.ready) == (0, 1)


@pytest.mark.both_deployments
def test_next_due_per_slot(client, clock):
    client.create_topic("t", slots=1)
    client.send("t", b"x", delay_ms=700)
    client.send("t", b"y", delay_ms=300)
    (slot,) = client.stats("t").groups["default"].slots
    assert slot.next_due_at == clock() + 300


def test_stats_are_per_group(client):
    client.create_topic("t")
    client.bind("t", "a")
    client.bind("t", "b")
    client.send("t", b"x")
    client.ack(client.claim("t", "a"))
    groups = client.stats("t").groups
    assert set(groups) == {"a", "b", "default"}
    assert (groups["a"].counters["acked"], groups["a"].ready) == (1, 0)
    assert (groups["b"].counters["acked"], groups["b"].ready) == (0, 1)


def test_to_dict_is_plain_json_data(client):
    client.create_topic("t", slots=2)
    client.send("t", b"x", priority=9)
    data = client.stats("t").to_dict()
    assert json.loads(json.dumps(data))["groups"]["default"]["ready"] == 1
    assert data["groups"]["default"]["ready_by_priority"] == {9: 1}
    assert len(data["groups"]["default"]["slots"]) == 2


def test_stats_change_nothing(client, clock):
    client.create_topic("t", slots=1)
    client.send("t", b"a")
    client.send("t", b"b", delay_ms=50)
    before = client.stats("t")
    assert client.stats("t") == before
    clock.advance(100)
    client.stats("t")
    assert [m.body for m in client.claim("t", count=5)] == [b"a", b"b"]
    assert isinstance(before, rmq.TopicStats)


# -- the signals an autoscaler and a dashboard read (SPEC §16) ------------------------------


@pytest.mark.both_deployments
def test_in_flight_deliveries_whose_lease_ran_out_count_as_expired_until_recovered(
        client, clock):
    client.create_topic("t", slots=2, visibility_timeout=10, retry_backoff=0)
    client.send_many("t", [f"m{i}" for i in range(6)])
    claimed = client.claim("t", count=6)
    assert client.extend(claimed[:1], 60) == [True]  # its own lease outlives its share's
    group = client.stats("t").groups["default"]
    assert (group.in_flight, group.expired) == (6, 0)
    clock.advance(11_000)
    group = client.stats("t").groups["default"]
    assert (group.in_flight, group.expired) == (6, 5)
    assert sum(s.expired for s in group.slots) == 5
    assert client.stats("t").to_dict()["groups"]["default"]["expired"] == 5
    assert client.recover("t") == 5
    group = client.stats("t").groups["default"]
    assert (group.in_flight, group.expired, group.ready) == (1, 0, 5)
    clock.advance(60_000)
    assert client.stats("t").groups["default"].expired == 1


@pytest.mark.both_deployments
def test_a_limited_group_reports_the_units_of_its_max_in_flight_in_use(client, clock):
    client.create_topic("t", slots=2, visibility_timeout=10)
    client.send_many("t", [f"m{i}" for i in range(8)])
    assert client.stats("t").groups["default"].limit_in_use is None  # no max_in_flight
    client.set_limits("t", max_in_flight=4)
    held = client.claim("t", count=8)
    assert len(held) == 4
    group = client.stats("t").groups["default"]
    assert (group.limit_in_use, group.limits.max_in_flight, group.in_flight) == (4, 4, 4)
    client.ack(held[:1])
    assert client.stats("t").groups["default"].limit_in_use == 3
    clock.advance(11_000)  # a dead consumer's units come back with its leases' end
    group = client.stats("t").groups["default"]
    assert (group.limit_in_use, group.in_flight, group.expired) == (0, 3, 3)


def test_stats_add_up_the_handler_times_the_groups_consumers_report(client):
    client.create_topic("t")
    client.bind("t", "gpu")
    client.bind("t", "audit")
    fast = HandlerTimes((3, 1) + (0,) * (len(BOUNDS) - 1), 0.02)
    slow = HandlerTimes((0,) * (len(BOUNDS) - 1) + (2, 0), 700.0)
    for name, group, times in (("a", "gpu", fast), ("b", "gpu", slow), ("c", "audit", fast)):
        client.heartbeat(ConsumerState(name, "t", group, "host", 1, client.now(), 4, 0,
                                       times.count, 0, times))
    groups = client.stats("t").groups
    gpu = groups["gpu"].handler_times
    assert gpu is not None and gpu.count == 6 and gpu.seconds == pytest.approx(700.02)
    assert gpu.cumulative()[0] == (0.005, 3) and gpu.cumulative()[-1] == (float("inf"), 6)
    assert (gpu.quantile(0.5), gpu.quantile(0.6), gpu.quantile(0.99)) == (0.005, 0.01, 600.0)
    assert groups["audit"].handler_times == fast
    assert groups["default"].handler_times is None  # no consumer reported any


@pytest.mark.sync_client
def test_a_consumer_reports_its_handler_times_in_its_heartbeats(make_client):
    client = make_client()
    client.create_topic("t")
    client.send_many("t", [f"m{i}" for i in range(5)])
    consumer = rmq.Consumer(client, "t", lambda m: None, heartbeat_interval=0.05).start()
    try:
        wait_for(lambda: (client.stats("t").groups["default"].handler_times
                          or HandlerTimes()).count == 5, what="5 runs in a heartbeat")
    finally:
        consumer.stop(grace=1)
    (info,) = [c for c in client.consumers("t") if c.id == consumer.id] or [None]
    assert info is None  # a stopped consumer leaves the registry
    times = client.stats("t").groups["default"].handler_times
    assert times is None  # and its handler times with it
