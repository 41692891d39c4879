"""Supersede through faults (SPEC §14, docs/semantics.md "Supersede and cancel"): Redis keeps
the mark that decides how a superseded delivery settles, so neither a consumer killed while
it runs one nor a stop channel nobody hears loses a message or runs a stale one again: the
newer message runs, the superseded delivery is dropped however it ends (its lease running
out included), and a client's stop watch that lost its connection listens again."""

from __future__ import annotations

import queue
import threading
from typing import Any
from urllib.parse import urlsplit

import pytest
from helpers import wait_for
from support.nodes import cut_pubsub_connections, node_urls_fixture, subscribers  # noqa: F401

import rmq
from chaos.fleet import Fleet
from chaos.proxy import TcpProxy
from rmq.storage.keys import stop_channel

pytestmark = pytest.mark.faults

LEASE = 1.0  # seconds: a killed consumer's delivery is recovered soon after


def group_stats(client: rmq.Client, topic: str) -> Any:
    return client.stats(topic).groups["default"]


def test_a_consumer_killed_while_its_delivery_is_superseded_loses_nothing_and_repeats_nothing(
        redis_url, tmp_path):
    client = rmq.Client(redis_url)
    client.create_topic("prices", merge="key", slots=4, visibility_timeout=LEASE)
    client.bind("prices", "default", supersede=True)
    # a consumer process whose "slow-" renders take a minute: it runs the first price when
    # it is killed
    fleet = Fleet(tmp_path, redis_url, "prices", lease=LEASE, slow="slow-", slow_ms=60_000)
    victim = fleet.spawn(concurrency=1, prefetch=1)  # holds the one it runs
    handled: queue.Queue[tuple[bytes, int]] = queue.Queue()
    survivor = rmq.Consumer(client, "prices", lambda m: handled.put((m.body, m.attempts)),
                            concurrency=1, prefetch=1, recover_interval=0.2)
    try:
        client.send("prices", "slow-price=10", key="product-42")
        wait_for(lambda: group_stats(client, "prices").in_flight == 1, what="the render to run")
        survivor.start()
        client.send("prices", "price=12", key="product-42")  # supersedes the running render
        # the newer value waits while the stale render runs: the last to complete is newest
        assert client.claim("prices", count=10) == []
        victim.kill()  # SIGKILL while it runs the superseded delivery
        # its lease runs out and the survivor's recovery drops it; then the newer one runs
        assert handled.get(timeout=LEASE + 10) == (b"price=12", 1)
        wait_for(lambda: group_stats(client, "prices").in_flight == 0, timeout=10,
                 what="the newer value acknowledged")
        survivor.stop()
        fleet.stop()
        assert handled.empty()  # the superseded one did not run again
        assert fleet.handled().handlings == 0  # the killed one never finished it
        stats = group_stats(client, "prices")
        assert {name: stats.counters[name] for name in ("superseded", "retried", "dead",
                                                        "acked")} == {
            "superseded": 1, "retried": 0, "dead": 0, "acked": 1}
        assert list(client.snapshot("prices")) == []  # not pending, not dead-lettered
    finally:
        survivor.stop()
        fleet.stop()
        client.close()


def test_a_stop_channel_nobody_hears_still_drops_the_superseded_delivery_and_is_heard_again(
        redis_url, node_urls):
    """The consumer's client reaches Redis through a proxy that is cut while a newer price is
    sent: on a single node everything of that client waits, on a cluster only its stop
    watch (the cluster client talks to the nodes the cluster names, not to the proxy)."""
    sender = rmq.Client(redis_url)
    sender.create_topic("prices", merge="key")
    sender.bind("prices", "default", supersede=True)
    channel = stop_channel("prices")
    proxy = TcpProxy(urlsplit(node_urls[0]).port or 0)
    client = rmq.Client(proxy.url)
    started: queue.Queue[bytes] = queue.Queue()
    handled: queue.Queue[bytes] = queue.Queue()
    go_on = threading.Event()
    heard: dict[bytes, bool] = {}

    def render(message: rmq.Message) -> None:
        started.put(message.body)
        if message.body == b"price=10":
            go_on.wait(10)  # renders on, as one that never heard the signal would
            heard[message.body] = message.superseded
        elif message.body == b"price=12":
            heard[message.body] = message.wait_superseded(timeout=10)
        handled.put(message.body)

    sender.send("prices", "price=10", key="product-42")
    # On a cluster the consumer's claims and lease extensions bypass the proxy: none may run
    # within the test, as an extension would tell the handler what the channel did not. On a
    # single node all of them wait for the proxy, and the wake-up its claims miss meanwhile
    # is made up by the idle wake-up (recover_interval).
    quiet = {"heartbeat_interval": 30, "recover_interval": 30} if len(node_urls) > 1 else {}
    consumer = rmq.Consumer(client, "prices", render, concurrency=2, **quiet).start()
    try:
        assert started.get(timeout=10) == b"price=10"
        assert subscribers(node_urls, channel) == 1
        proxy.cut("reset")
        wait_for(lambda: subscribers(node_urls, channel) == 0, what="the watch to be cut off")
        sender.send("prices", "price=12", key="product-42")  # told to nobody
        assert group_stats(sender, "prices").counters["superseded"] == 1  # Redis marked it
        go_on.set()
        # unheard, the stale render ran to its end; its settle (on a single node, once the
        # network is back) drops it, and the newer price runs
        wait_for(lambda: b"price=10" in heard, what="the stale render to end")
        assert heard[b"price=10"] is False
        assert subscribers(node_urls, channel) == 0  # still nobody listened
        proxy.restore()
        assert started.get(timeout=15) == b"price=12"
        wait_for(lambda: subscribers(node_urls, channel) == 1, timeout=15,
                 what="the stop watch to listen again")
        sender.send("prices", "price=13", key="product-42")
        # (the newest may start before the one it superseded has returned)
        assert sorted(finished(handled)) == [b"price=10", b"price=12", b"price=13"]
        assert heard[b"price=12"] is True
    finally:
        go_on.set()
        proxy.restore()
        consumer.stop()
        client.close()
        proxy.close()
    stats = group_stats(sender, "prices")
    sender.close()
    assert {name: stats.counters[name] for name in ("superseded", "retried", "acked")} == {
        "superseded": 2, "retried": 0, "acked": 3}
    assert (stats.pending, stats.in_flight) == (0, 0)


def finished(handled: queue.Queue[bytes], n: int = 3) -> list[bytes]:
    """The next ``n`` bodies the handler finished, each within 15 s."""
    return [handled.get(timeout=15) for _ in range(n)]


def test_a_stop_watch_whose_connection_is_killed_subscribes_again(redis_url, node_urls):
    client = rmq.Client(redis_url)
    try:
        client.create_topic("renders")
        client.bind("renders", "gpu", supersede=True)
        client.send("renders", "product-42")
        (running,) = client.claim("renders", "gpu")
        assert subscribers(node_urls, stop_channel("renders")) == 1
        assert cut_pubsub_connections(node_urls) >= 1  # CLIENT KILL TYPE pubsub
        wait_for(lambda: subscribers(node_urls, stop_channel("renders")) == 1,
                 what="the stop watch to subscribe again")
        client.send("renders", "product-42")
        assert running.wait_superseded(timeout=5)
        assert client.nack(running, "stopped early") == "superseded"
    finally:
        client.close()
