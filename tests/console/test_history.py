"""Throughput history (issue 10, point 2): samples of the counters and backlog the scripts
already keep, one per bucket of Redis's clock however many samplers run, in a fixed ring.

Most tests drive the storage operation with a 100 ms bucket (the client's is 5 s) so that
buckets pass quickly; the client methods are the same operation with the defaults."""

from __future__ import annotations

import threading
import time

import pytest
from helpers import wait_for

import rmq
from rmq.storage import history
from rmq.storage.keys import RegistryKeys

pytestmark = [pytest.mark.extras, pytest.mark.single_node]

WIDTH = 100


@pytest.fixture
def client(redis_url: str):
    with rmq.Client(redis_url) as c:
        yield c


def sample(client: rmq.Client, topic: str, size: int = 50) -> bool:
    info = client.topic(topic, fresh=True)
    return client._run(history.record(topic, info.groups, info.settings.slots, info.paused,
                                      client.clock(), width_ms=WIDTH, size=size))


def read(client: rmq.Client, topic: str) -> rmq.TopicHistory:
    info = client.topic(topic, fresh=True)
    return client._run(history.read(topic, info.groups, 60, width_ms=WIDTH,
                                    gap_after_ms=3 * WIDTH))


def server_ms(client: rmq.Client) -> int:
    return client._run(history.read("none", [], 1)).now


def next_bucket(client: rmq.Client) -> None:
    bucket = server_ms(client) // WIDTH
    wait_for(lambda: server_ms(client) // WIDTH > bucket, 5, "the next bucket")


def test_no_sampler_means_no_history(client: rmq.Client) -> None:
    client.create_topic("t")
    client.send_many("t", ["a", "b"])
    assert client.history("t").groups == {"default": []}


def test_several_samplers_take_each_bucket_once(client: rmq.Client, redis_url: str) -> None:
    client.create_topic("t", slots=2)
    others = [rmq.Client(redis_url) for _ in range(3)]
    taken: list[int] = []
    lock = threading.Lock()
    deadline = time.monotonic() + 1.0

    def sampler(c: rmq.Client) -> None:
        while time.monotonic() < deadline:
            if sample(c, "t"):
                with lock:
                    taken.append(server_ms(c) // WIDTH)

    threads = [threading.Thread(target=sampler, args=(c,)) for c in others]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for c in others:
        c.close()
    samples = read(client, "t").groups["default"]
    buckets = [s.at // WIDTH for s in samples]
    assert len(buckets) == len(set(buckets)) == len(taken)  # one sample per bucket
    assert len(samples) >= 5


def test_rates_are_counter_increases_over_the_real_time_between_samples(
        client: rmq.Client) -> None:
    client.create_topic("t", slots=4)
    assert sample(client, "t")
    client.send_many("t", [f"m{i % 30}" for i in range(100)])  # 30 stored, 70 merged
    client.ack(client.claim("t", count=10))
    next_bucket(client)
    assert sample(client, "t")
    first, second = read(client, "t").groups["default"]
    seconds = (second.at - first.at) / 1000
    assert second.rates is not None
    assert second.rates["sent"] == pytest.approx(100 / seconds)
    assert second.rates["merged"] == pytest.approx(70 / seconds)
    assert second.rates["acked"] == pytest.approx(10 / seconds)
    assert second.merge_rate == pytest.approx(0.7)
    assert second.backlog == {"ready": 20, "delayed": 0, "in_flight": 0, "dead": 0}
    assert first.rates is None  # nothing before it


def test_a_pause_in_sampling_is_a_gap_not_a_slow_rate(client: rmq.Client) -> None:
    client.create_topic("t")
    assert sample(client, "t")
    client.send_many("t", ["a", "b"])
    start = server_ms(client)
    wait_for(lambda: server_ms(client) > start + 4 * WIDTH, 5, "four buckets to pass")
    assert sample(client, "t")
    next_bucket(client)
    assert sample(client, "t")
    first, after_gap, following = read(client, "t").groups["default"]
    assert after_gap.rates is None and after_gap.merge_rate is None
    assert after_gap.backlog["ready"] == 2  # the state is known; only the rate is not
    assert following.rates == {name: 0.0 for name in following.counters}


def test_the_ring_keeps_a_fixed_size_and_the_newest_samples(client: rmq.Client) -> None:
    client.create_topic("t")
    for _ in range(12):  # more samples than the ring of 8 holds
        assert sample(client, "t", size=8)
        client.send("t", "x")
        next_bucket(client)
    samples = read(client, "t").groups["default"]
    assert len(samples) == 8
    assert [s.counters["sent"] for s in samples] == list(range(4, 12))
    assert client.redis.strlen(RegistryKeys("t").history_ring("default")) == 8 * 64


@pytest.mark.both_deployments
def test_the_client_samples_in_five_second_buckets_of_redis_time(client: rmq.Client) -> None:
    client.create_topic("t", slots=2)
    client.bind("t", "audit")
    client.send_many("t", ["a", "b", "a"])
    assert client.record_history("t")  # the first sample of the topic
    again = client.record_history("t")  # True only if a bucket boundary fell in between
    got = client.history("t", minutes=1)
    assert got.width_ms == 5000
    assert set(got.groups) == {"audit", "default"}
    assert len(got.groups["audit"]) == 1 + again
    first = got.groups["audit"][0]
    assert first.counters["sent"] == 3 and first.counters["merged"] == 1
    assert first.backlog["ready"] == 2
    assert abs(first.at - got.now) < 5000 * (1 + again)


@pytest.mark.both_deployments
def test_deleting_a_topic_drops_its_history(client: rmq.Client) -> None:
    client.create_topic("t")
    sample(client, "t")
    client.delete_topic("t")
    client.create_topic("t")
    assert read(client, "t").groups["default"] == []


def test_a_sampler_with_a_stale_cache_writes_no_history_for_a_deleted_topic(
        client: rmq.Client, redis_url: str) -> None:
    # A consumer's keeper samples through its client's registry cache, which may still hold
    # a topic deleted since: that sample must not leave keys behind.
    client.create_topic("t")
    with rmq.Client(redis_url, registry_ttl=3600) as stale:
        info = stale.topic("t")
        client.delete_topic("t")
        taken = stale._run(history.record("t", info.groups, info.settings.slots, info.paused,
                                          stale.clock(), width_ms=WIDTH))
        assert taken is False
        assert stale.record_history("t") is False
    assert sorted(client.redis.scan_iter(match="rmq:{t}*")) == []


def test_running_consumers_sample_the_history_without_a_console(client: rmq.Client,
                                                                redis_url: str) -> None:
    client.create_topic("t", slots=2)
    client.send_many("t", ["a", "b", "c"])
    consumer = rmq.Consumer(rmq.Client(redis_url), "t", lambda m: None,
                            heartbeat_interval=0.2).start()
    try:
        wait_for(lambda: client.history("t").groups["default"], 10,
                 "the consumer's housekeeping to take a sample")
    finally:
        consumer.stop(grace=1)
        consumer.client.close()
