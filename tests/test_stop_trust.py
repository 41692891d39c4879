"""Only Redis orders a stop (SPEC §14 "Trust", docs/semantics.md "Supersede and cancel"):
what a process hears on a topic's stop channel is a hint, acted on only for a delivery the
process asks about and only once Redis confirms the mark; a delivery's stop state is
forgotten when it settles, and a cancelled delivery says cancelled."""

from __future__ import annotations

import asyncio
import json
import queue
import threading

import pytest
import redis
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401

import rmq
from rmq.message import stop_key
from rmq.stops import BOARD, HINTS
from rmq.storage.keys import stop_channel

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]


def forge(redis_url, message, reason="superseded", ids=None):
    """Publish on the stop channel what no script ordered, as any client allowed to
    publish there can."""
    redis.Redis.from_url(redis_url).publish(stop_channel(message.topic), json.dumps({
        "generation": message.generation, "group": message.group, "slot": message.slot,
        "reason": reason, "ids": [message.seq] if ids is None else ids}))


def counters(client, topic, group):
    return client.stats(topic).groups[group].counters


def test_a_forged_stop_does_not_stop_a_delivery_redis_never_marked(client, redis_url):
    client.create_topic("renders", slots=1)
    client.bind("renders", "gpu", supersede=True)
    client.send("renders", "p")
    client.send("renders", "q")
    held = {m.body: m for m in client.claim("renders", "gpu", count=2)}
    assert not held[b"p"].superseded  # asked about: a hint of it would be confirmed
    forge(redis_url, held[b"p"])
    forge(redis_url, held[b"q"], reason="cancelled")
    client.send("renders", "q")  # a real supersede, heard after the forged ones
    assert held[b"q"].wait_stopped(timeout=10)
    assert held[b"q"].stop_reason == "superseded"  # Redis's mark, not the forged reason
    assert not held[b"p"].stopped and held[b"p"].stop_reason is None
    assert not held[b"p"].wait_superseded(timeout=0)
    assert client.ack(list(held.values())) == 2
    stats = counters(client, "renders", "gpu")
    assert (stats["acked"], stats["superseded"]) == (2, 1)  # p handled, q dropped


def test_a_forged_stop_of_a_delivery_not_asked_about_yet_is_confirmed_when_asked(
        client, redis_url):
    client.create_topic("renders", slots=1)
    client.bind("renders", "gpu", supersede=True)
    client.send("renders", "p")
    client.send("renders", "q")
    held = {m.body: m for m in client.claim("renders", "gpu", count=2)}
    forge(redis_url, held[b"p"])
    client.send("renders", "q")
    assert held[b"q"].wait_stopped(timeout=10)  # the forged hint came first: it is here
    assert not held[b"p"].superseded  # asked now: Redis holds no mark of it


def test_a_forged_stop_in_a_group_without_supersede_cancels_no_async_handler(
        make_client, redis_url):
    client = make_client("sync")
    client.create_topic("prices", merge="key", slots=1)
    client.bind("prices", "gpu")
    started, cancelled, handled = queue.Queue(), queue.Queue(), queue.Queue()
    release = threading.Event()

    async def render(message):
        started.put(message)
        try:
            while not release.is_set():
                await asyncio.sleep(0.01)
        except asyncio.CancelledError:
            cancelled.put(message.key)
            raise
        handled.put((message.key, message.stop_reason))

    client.send("prices", "price=10", key="p")
    client.send("prices", "price=20", key="q")
    consumer = rmq.Consumer(client, "prices", render, group="gpu", concurrency=2,
                            cancel_superseded=True).start()
    try:
        running = {m.key: m for m in (started.get(timeout=10), started.get(timeout=10))}
        forge(redis_url, running[b"p"])
        # a real stop, published after the forged one: heard once the forged one was
        assert client.cancel("prices", running[b"q"].message_id).running == 1
        assert cancelled.get(timeout=10) == b"q"
        release.set()
        assert handled.get(timeout=10) == (b"p", None)
    finally:
        consumer.stop()
    stats = counters(client, "prices", "gpu")
    assert (stats["acked"], stats["cancelled"], stats["superseded"]) == (1, 1, 0)


def test_a_cancelled_delivery_says_cancelled_not_superseded(client):
    client.create_topic("renders", slots=1)
    client.send("renders", "p")
    (running,) = client.claim("renders")
    outcome = client.cancel("renders", running.message_id)
    assert outcome.running == 1
    assert running.wait_stopped(timeout=10)
    assert (running.cancelled, running.superseded, running.stop_reason) == (
        True, False, "cancelled")


def test_the_stop_board_keeps_no_more_than_its_bound_of_what_it_does_not_hold(
        client, redis_url):
    client.create_topic("renders", slots=1)
    client.bind("renders", "gpu", supersede=True)
    client.send("renders", "p")
    (held,) = client.claim("renders", "gpu")
    before = len(BOARD)
    forge(redis_url, held, ids=list(range(1, 50_001)))  # the fleet's, or an attacker's
    client.send("renders", "p")
    assert held.wait_stopped(timeout=10)
    assert len(BOARD) - before <= HINTS + 1
    client.ack(held)
    assert stop_key(held) not in BOARD._signals  # settled: forgotten


class _ClosedAfterFirstLook(threading.Event):
    """A watch's closed flag that reads clear once, then set: the client closes between the
    watch's look at the flag and its read."""

    def __init__(self) -> None:
        super().__init__()
        self.looks = 0

    def is_set(self) -> bool:
        self.looks += 1
        return self.looks > 1


def test_a_client_closing_between_its_stop_watch_s_look_and_read_ends_the_watch_quietly(
        client):
    client.create_topic("renders")
    client.claim("renders")  # opens the topic's stop watch
    watch = client._stops._topics["renders"]
    watch.close()
    watch._thread.join(timeout=10)
    watch._pubsub = watch._subscribe()
    # what the client's close does to a read already past redis-py's subscribed check
    watch._pubsub.connection.disconnect()
    watch._pubsub.connection = None
    watch._closed = _ClosedAfterFirstLook()
    watch._run()  # returns, where redis-py's RuntimeError once ended the thread
    assert watch._closed.looks == 2


def test_a_delivery_keeps_saying_it_was_stopped_after_it_settles(client):
    client.create_topic("renders", slots=1, merge="key")
    client.bind("renders", "gpu", supersede=True)
    client.send("renders", "price=1", key="p")
    (stale,) = client.claim("renders", "gpu")
    client.send("renders", "price=2", key="p")
    assert stale.wait_stopped(timeout=10)
    assert client.nack(stale, "stopped early") == "superseded"
    assert stop_key(stale) not in BOARD._signals  # the board forgot it...
    assert stale.superseded and stale.stop_reason == "superseded"  # ...the message did not
