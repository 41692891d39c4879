"""Supersede (SPEC §14, docs/semantics.md "Supersede and cancel"): in a group bound with
``supersede=True``, a send whose identity is in flight there tells that delivery to stop;
whatever its handler does then, the delivery is dropped, not retried (the newer message is
pending), counted ``superseded`` and traced. After ``supersede_limit`` supersedes in a row
of one identity, the next delivery is left to finish."""

from __future__ import annotations

import asyncio
import json
import queue
import threading

import pytest
import redis
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import states

import rmq
from rmq.errors import ConflictingOptions, InvalidArgument
from rmq.message import stop_key
from rmq.stops import BOARD
from rmq.storage.keys import SlotKeys, stop_channel, wake_channel

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]


def counters(client, topic, group="default"):
    return client.stats(topic).groups[group].counters


def running(redis_url, topic, group="default", slot=0):
    return redis.Redis.from_url(redis_url).hgetall(SlotKeys(topic, slot).group(group).running)


def test_a_send_of_a_running_body_supersedes_its_delivery(client):
    client.create_topic("renders")
    client.bind("renders", "gpu", supersede=True)
    client.send("renders", "product-42")
    (running_one,) = client.claim("renders", "gpu")
    resent = client.send("renders", "product-42")
    assert not resent.merged  # a new pending message: the running one is stale
    assert counters(client, "renders", "gpu")["superseded"] == 1
    # the handler fails afterwards: the delivery is dropped, not retried
    assert client.nack(running_one, "stopped early") == "superseded"
    assert states(client, "renders", "gpu") == {"ready": [b"product-42"], "delayed": [],
                                                  "in_flight": [], "dead": []}
    assert counters(client, "renders", "gpu")["retried"] == 0


def test_a_group_without_supersede_keeps_running_what_a_send_made_stale(client, redis_url):
    client.create_topic("renders")
    client.bind("renders", "gpu")
    client.send("renders", "product-42")
    (running_one,) = client.claim("renders", "gpu")
    client.send("renders", "product-42")
    assert counters(client, "renders", "gpu").get("superseded", 0) == 0
    assert running(redis_url, "renders", "gpu") == {}
    assert client.nack(running_one) == "retried"  # merges into the pending one


def test_after_the_limit_of_supersedes_in_a_row_a_delivery_runs_to_its_end(client, redis_url):
    client.create_topic("renders")
    client.bind("renders", "gpu", supersede=True, supersede_limit=2)
    client.send("renders", "p")
    outcomes = []
    for _ in range(4):
        (delivery,) = client.claim("renders", "gpu")
        client.send("renders", "p")
        outcomes.append(client.nack(delivery))
    # two superseded in a row; the third is left alone (its nack retries it: merged into
    # the pending one); then the streak starts again
    assert outcomes == ["superseded", "superseded", "retried", "superseded"]
    assert counters(client, "renders", "gpu")["superseded"] == 3
    (last,) = client.claim("renders", "gpu")
    assert client.ack(last) == 1
    assert running(redis_url, "renders", "gpu") == {}  # nothing left behind


def test_a_finished_delivery_resets_the_streak(client, redis_url):
    client.create_topic("renders")
    client.bind("renders", "gpu", supersede=True, supersede_limit=1)
    client.send("renders", "p")
    (first,) = client.claim("renders", "gpu")
    client.send("renders", "p")  # supersedes: streak 1, the limit
    client.ack(first)
    (second,) = client.claim("renders", "gpu")
    client.send("renders", "p")  # the limit reached: runs to its end
    assert counters(client, "renders", "gpu")["superseded"] == 1
    client.ack(second)
    (third,) = client.claim("renders", "gpu")
    client.send("renders", "p")  # a finished one reset the streak
    assert counters(client, "renders", "gpu")["superseded"] == 2
    assert client.nack(third) == "superseded"


def test_merging_by_key_a_newer_value_supersedes_the_running_one(client):
    client.create_topic("prices", merge="key")
    client.bind("prices", "gpu", supersede=True)
    client.send("prices", "price=10", key="product-42")
    (stale,) = client.claim("prices", "gpu")
    client.send("prices", "price=12", key="product-42")
    client.send("prices", "price=13", key="product-42")  # merges into the pending one
    assert counters(client, "prices", "gpu")["superseded"] == 1
    assert client.ack(stale) == 1
    (newest,) = client.claim("prices", "gpu")
    assert (newest.body, newest.message_id) == (b"price=13", stale.message_id)


def test_send_many_and_a_commit_supersede_as_sends_do(client):
    client.create_topic("prices", merge="key", slots=4)
    client.bind("prices", "gpu", supersede=True)
    client.send_many("prices", [{"body": f"v1-{n}", "key": f"k{n}"} for n in range(6)])
    running_ones = client.claim("prices", "gpu", count=6)
    client.send_many("prices", [{"body": f"v2-{n}", "key": f"k{n}"} for n in range(3)])
    assert counters(client, "prices", "gpu")["superseded"] == 3
    with client.transaction("prices") as tx:
        tx.send("v3-5", key="k5")
    assert counters(client, "prices", "gpu")["superseded"] == 4
    outcomes = sorted(client.nack(m) or "" for m in running_ones)
    assert outcomes == ["retried"] * 2 + ["superseded"] * 4


def test_a_lease_that_runs_out_on_a_superseded_delivery_drops_it(client, clock):
    client.create_topic("renders", visibility_timeout=5)
    client.bind("renders", "gpu", supersede=True)
    client.send("renders", "p")
    client.claim("renders", "gpu")
    client.send("renders", "p")
    clock.advance(10)
    assert client.recover("renders") == 0  # none went back to pending
    assert states(client, "renders", "gpu")["ready"] == [b"p"]
    assert counters(client, "renders", "gpu")["retried"] == 0


def test_a_released_superseded_delivery_is_dropped(client):
    client.create_topic("renders")
    client.bind("renders", "gpu", supersede=True)
    client.send("renders", "p")
    (delivery,) = client.claim("renders", "gpu")
    client.send("renders", "p")
    assert client.release([delivery]) == 1
    assert states(client, "renders", "gpu")["ready"] == [b"p"]  # the newer one alone


def test_the_stop_channel_names_the_superseded_delivery(client, redis_url):
    client.create_topic("renders", slots=4)
    client.bind("renders", "gpu", supersede=True)
    client.send("renders", "p")
    (delivery,) = client.claim("renders", "gpu")
    listener = redis.Redis.from_url(redis_url).pubsub(ignore_subscribe_messages=True)
    listener.subscribe(stop_channel("renders"))
    listener.get_message(timeout=1.0)  # the subscription's confirmation
    client.send("renders", "p")
    told = listener.get_message(timeout=5.0)
    listener.close()
    assert told is not None
    assert json.loads(told["data"]) == {"generation": delivery.generation, "group": "gpu",
                                        "slot": delivery.slot,
                                        "reason": "superseded", "ids": [str(delivery.seq)]}


def test_the_trace_records_the_supersede(client):
    client.create_topic("renders", trace=True)
    client.bind("renders", "gpu", supersede=True)
    sent = client.send("renders", "p")
    (delivery,) = client.claim("renders", "gpu")
    client.send("renders", "p")
    events = [(e.event, e.delivery_id) for e in client.trace("renders", sent.message_id)]
    assert ("superseded", delivery.id) in events


def test_bind_keeps_or_turns_supersede_off_and_checks_its_options(client, redis_url):
    client.create_topic("renders")
    client.bind("renders", "gpu", supersede=True, supersede_limit=5)
    assert client.topic("renders", fresh=True).supersede_limit("gpu") == 5
    client.bind("renders", "gpu", tags="*")  # filters change, supersede stays
    assert client.topic("renders", fresh=True).supersede_limit("gpu") == 5
    client.bind("renders", "gpu", supersede=False)
    assert client.topic("renders", fresh=True).supersede_limit("gpu") is None
    with pytest.raises(ConflictingOptions, match="supersede_limit"):
        client.bind("renders", "gpu", supersede_limit=2)
    with pytest.raises(InvalidArgument, match="supersede_limit"):
        client.bind("renders", "gpu", supersede=True, supersede_limit=0)
    client.bind("renders", "gpu", supersede=True)
    client.unbind("renders", "gpu")
    client.bind("renders", "gpu")  # bound again: without supersede
    assert client.topic("renders", fresh=True).supersede_limit("gpu") is None


def test_the_running_handler_hears_that_it_was_superseded(client, make_client):
    client.create_topic("renders", slots=4)
    client.bind("renders", "gpu", supersede=True)
    client.send("renders", "p")
    client.send("renders", "q")
    deliveries = {m.body: m for m in client.claim("renders", "gpu", count=2)}
    assert not deliveries[b"p"].superseded
    make_client().send("renders", "p")  # another process's producer
    assert deliveries[b"p"].wait_superseded(timeout=10)
    assert deliveries[b"p"].stop_reason == "superseded"
    assert not deliveries[b"q"].wait_superseded(timeout=0.05)


def test_a_consumer_s_handler_stops_early_and_the_newer_message_runs(make_client):
    client = make_client("sync")
    client.create_topic("renders")
    client.bind("renders", "gpu", supersede=True)
    started, handled, stopped_early = threading.Event(), queue.Queue(), []

    def render(message):
        if not started.is_set():  # the first delivery: renders until told to stop
            started.set()
            stopped_early.append(message.wait_superseded(timeout=30))
            return  # returning acknowledges: the delivery is done with either way
        handled.put(message.body)

    client.send("renders", "v1", key="p")
    consumer = rmq.Consumer(client, "renders", render, group="gpu", concurrency=2).start()
    try:
        assert started.wait(10)
        client.send("renders", "v1", key="p")  # the same body again: supersedes the running
        assert handled.get(timeout=10) == b"v1"
    finally:
        consumer.stop()
    assert stopped_early == [True]
    assert counters(client, "renders", "gpu")["superseded"] == 1


def test_cancel_superseded_cancels_an_async_handler_s_task(make_client):
    client = make_client("sync")
    client.create_topic("prices", merge="key")
    client.bind("prices", "gpu", supersede=True)
    started, handled, cancelled = threading.Event(), queue.Queue(), []

    async def render(message):
        if message.body == b"price=10":
            started.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancelled.append(message.stop_reason)
                raise
        handled.put(message.body)

    client.send("prices", "price=10", key="p")
    consumer = rmq.Consumer(client, "prices", render, group="gpu",
                            cancel_superseded=True).start()
    try:
        assert started.wait(10)
        client.send("prices", "price=12", key="p")
        assert handled.get(timeout=10) == b"price=12"
    finally:
        consumer.stop()
    assert cancelled == ["superseded"]
    stats = counters(client, "prices", "gpu")
    assert (stats["superseded"], stats.get("retried", 0), stats["acked"]) == (1, 0, 1)


def test_cancel_superseded_takes_an_async_handler_only(client):
    client.create_topic("renders")
    with pytest.raises(InvalidArgument, match="cancel_superseded"):
        rmq.Consumer(client, "renders", lambda m: None, cancel_superseded=True)


def test_an_async_handler_awaits_until_superseded(make_client):
    client = make_client("sync")
    client.create_topic("renders")
    client.bind("renders", "gpu", supersede=True)
    client.send("renders", "p")
    (delivery,) = client.claim("renders", "gpu")

    async def wait_for_it():
        waiting = asyncio.ensure_future(delivery.until_superseded(timeout=30))
        await asyncio.sleep(0)  # (it listens before the send below)
        await asyncio.to_thread(client.send, "renders", "p")
        return await waiting

    assert asyncio.run(wait_for_it()) is True


def test_an_async_batch_is_cancelled_once_all_its_messages_are_superseded(make_client):
    client = make_client("sync")
    client.create_topic("renders", merge="key", slots=4)
    client.bind("renders", "gpu", supersede=True)
    started, handled, cancelled = threading.Event(), queue.Queue(), []

    async def render(batch):
        if not started.is_set():
            started.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                cancelled.append(sorted(m.body for m in batch if m.superseded))
                raise
        for message in batch:
            handled.put(message.body)

    client.send_many("renders", [{"body": "a1", "key": "a"}, {"body": "b1", "key": "b"}])
    consumer = rmq.Consumer(client, "renders", render, group="gpu", batch=2,
                            cancel_superseded=True).start()
    try:
        assert started.wait(10)
        client.send("renders", "a2", key="a")  # one of two: the batch runs on
        client.send("renders", "b2", key="b")  # both: cancelled
        assert {handled.get(timeout=10), handled.get(timeout=10)} == {b"a2", b"b2"}
    finally:
        consumer.stop()
    assert cancelled == [[b"a1", b"b1"]]
    stats = counters(client, "renders", "gpu")
    assert (stats["superseded"], stats.get("retried", 0)) == (2, 0)


def test_a_batch_handler_tells_which_of_its_messages_went_stale(make_client):
    client = make_client("sync")
    client.create_topic("renders", merge="key", slots=4)
    client.bind("renders", "gpu", supersede=True)
    started, seen = threading.Event(), queue.Queue()

    def render(batch):
        if not started.is_set():
            started.set()
            stale = next(m for m in batch if m.key == b"a")
            assert stale.wait_superseded(timeout=10)
            seen.put({m.body: m.superseded for m in batch})
        # (returning acknowledges the batch: its stale message is dropped all the same)

    client.send_many("renders", [{"body": "a1", "key": "a"}, {"body": "b1", "key": "b"}])
    consumer = rmq.Consumer(client, "renders", render, group="gpu", batch=2).start()
    try:
        assert started.wait(10)
        client.send("renders", "a2", key="a")
        assert seen.get(timeout=10) == {b"a1": True, b"b1": False}
    finally:
        consumer.stop()


@pytest.mark.parametrize("settle", ["nack", "release"])
def test_on_a_serial_topic_dropping_a_superseded_delivery_wakes_sleeping_claimers(
        client, redis_url, settle):
    client.create_topic("renders", serial_keys=True, merge="key")
    client.bind("renders", "gpu", supersede=True)
    client.send("renders", "v1", key="p")
    (stale,) = client.claim("renders", "gpu")
    client.send("renders", "v2", key="p")  # pending, its key held by the stale one
    assert client.claim("renders", "gpu") == []
    sleepers = redis.Redis.from_url(redis_url).pubsub(ignore_subscribe_messages=True)
    sleepers.subscribe(wake_channel("renders"))  # where sleeping claimers listen
    sleepers.get_message(timeout=1.0)  # the subscription's confirmation
    if settle == "nack":
        assert client.nack(stale) == "superseded"
    else:
        assert client.release([stale]) == 1
    woken = sleepers.get_message(timeout=5.0)  # the freed key: v2 can run now
    sleepers.close()
    assert woken is not None
    assert [m.body for m in client.claim("renders", "gpu")] == [b"v2"]


def test_a_consumer_that_missed_the_signal_learns_it_by_extending_the_lease(client):
    client.create_topic("renders")
    client.bind("renders", "gpu", supersede=True)
    client.send("renders", "p")
    client.send("renders", "q")
    deliveries = {m.body: m for m in client.claim("renders", "gpu", count=2)}
    client.send("renders", "p")
    stale = deliveries[b"p"]
    assert stale.wait_superseded(timeout=10)
    # as if the stop channel's message never came: nor the board's, nor the message's state
    BOARD.settled([stop_key(stale)])
    object.__setattr__(stale, "_stop", None)
    assert not stale.superseded
    assert client.extend(list(deliveries.values()), 30) == [True, True]
    assert stale.stop_reason == "superseded"
    assert not deliveries[b"q"].superseded


def test_deleting_the_topic_leaves_none_of_its_supersede_keys(client, redis_url):
    client.create_topic("renders", slots=2)
    client.bind("renders", "gpu", supersede=True)
    client.send("renders", "p")
    client.claim("renders", "gpu")
    client.send("renders", "p")  # a running entry, a mark
    server = redis.Redis.from_url(redis_url)
    assert server.keys("*renders*running"), "the test made no running key"
    client.delete_topic("renders")
    assert server.keys("*renders*") == []


@pytest.mark.both_clients
@pytest.mark.parametrize("topic", [[], {}, None, 7])
def test_a_claim_of_what_is_no_topic_name_is_refused_before_the_stop_watch(client, topic):
    with pytest.raises(rmq.errors.InvalidTopicName):
        client.claim(topic)
    with pytest.raises(rmq.errors.InvalidTopicName):
        client.claim_due(topic)


def test_a_newer_value_the_group_s_filter_rejects_supersedes_nothing(client):
    client.create_topic("prices", merge="key")
    client.bind("prices", "eu", tags="eu", supersede=True)
    client.send("prices", "price=10", key="p", tag="eu")
    (running_one,) = client.claim("prices", "eu")
    client.send("prices", "price=12", key="p", tag="us")  # not for this group
    assert counters(client, "prices", "eu")["superseded"] == 0
    assert not running_one.superseded
    assert client.nack(running_one) == "retried"


@pytest.mark.both_deployments
def test_a_newer_value_waits_while_an_older_delivery_of_its_key_runs_past_the_limit(client):
    """Without serial_keys, a superseding group of a key-mode topic still runs one delivery
    of a key at a time: the last handling of the key to complete is of its newest value."""
    client.create_topic("prices", merge="key", slots=2)
    client.bind("prices", "gpu", supersede=True, supersede_limit=1)
    client.send("prices", "price=1", key="p")
    (first,) = client.claim("prices", "gpu")
    client.send("prices", "price=2", key="p")  # supersedes the first (a streak of 1)
    assert client.claim("prices", "gpu") == []  # the first still runs: price 2 waits
    assert client.ack(first) == 1  # dropped (superseded)
    (second,) = client.claim("prices", "gpu")
    assert second.body == b"price=2"
    client.send("prices", "price=3", key="p")  # past the limit: the second runs on
    client.send("prices", "other", key="q")
    assert [m.body for m in client.claim("prices", "gpu")] == [b"other"]  # p waits
    assert client.ack(second) == 1
    (third,) = client.claim("prices", "gpu")
    assert third.body == b"price=3"  # the last to complete is the newest
    counters = client.stats("prices").groups["gpu"].counters
    assert counters["superseded"] == 1
