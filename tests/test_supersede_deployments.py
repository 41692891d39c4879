"""Supersede wherever SPEC §14 says it holds (docs/semantics.md "Supersede and cancel"): on a
Redis Cluster as on one node, heard by a claimer connected to any node whichever master ran
the send (a cluster forwards every PUBLISH to every node), with both clients; and under a
group's max_in_flight (SPEC §10), where a superseded delivery gives its unit back when its
handler stops, so the newer message runs."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from async_bridge import client_of_kind
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import states
from support.nodes import node_urls_fixture, subscribers  # noqa: F401

import rmq
from rmq.storage.keys import SlotKeys, stop_channel

pytestmark = pytest.mark.both_deployments  # a cluster's sends run on three masters


@pytest.fixture
def client_at(client_kind: str) -> Iterator[Callable[[str], Any]]:
    """A factory of clients of this test's kind on a given node's URL, closed at teardown."""
    made: list[Any] = []

    def make(url: str) -> Any:
        made.append(client_of_kind(client_kind)(url))
        return made[-1]

    yield make
    for c in made:
        c.close()


def counters(client: Any, topic: str, group: str) -> dict[str, int]:
    return client.stats(topic).groups[group].counters


def told_to_stop(messages: list[rmq.Message], client_kind: str) -> list[bool]:
    """Whether each delivery hears that it was superseded within 5 s: ``wait_superseded``,
    or the asyncio client's ``until_superseded``, all awaited at once."""
    if client_kind == "sync":
        return [m.wait_superseded(timeout=5) for m in messages]

    async def heard() -> list[bool]:
        return list(await asyncio.gather(*(m.until_superseded(timeout=5) for m in messages)))

    return asyncio.run(heard())


@pytest.mark.both_clients  # each client's own stop watch (a thread beside the event loop)
def test_a_supersede_reaches_a_claimer_connected_to_another_node(node_urls, client_at,
                                                                  client_kind):
    sender, claimer = client_at(node_urls[0]), client_at(node_urls[-1])
    sender.create_topic("prices", merge="key", slots=16)
    sender.bind("prices", "gpu", supersede=True)
    keys = [f"product-{n}" for n in range(12)]
    sender.send_many("prices", [{"body": "price=10", "key": key} for key in keys])
    running = claimer.claim("prices", "gpu", count=len(keys))
    assert sorted(m.key for m in running) == sorted(key.encode() for key in keys)
    if len(node_urls) > 1:
        # the deliveries' slots lie on every master, and the claimer listens on one of them
        served_by = {claimer.redis.get_node_from_key(SlotKeys("prices", m.slot).seq).port
                     for m in running}
        assert len(served_by) == len(node_urls) == 3
        assert [subscribers([url], stop_channel("prices")) for url in node_urls] == [0, 0, 1]
    assert not any(m.superseded for m in running)

    half = len(keys) // 2
    sender.send_many("prices", [{"body": "price=12", "key": key} for key in keys[:half]])
    for key in keys[half:]:
        sender.send("prices", "price=12", key=key)

    assert told_to_stop(running, client_kind) == [True] * len(keys)
    assert {m.stop_reason for m in running} == {"superseded"}
    # however they end, the stale ones are dropped: the newer values run once each
    assert claimer.ack(running[:half]) == half
    assert {claimer.nack(m, "stopped early") for m in running[half:]} == {"superseded"}
    newest = claimer.claim("prices", "gpu", count=len(keys) + 1)
    assert sorted((m.key, m.body, m.attempts) for m in newest) == sorted(
        (key.encode(), b"price=12", 1) for key in keys)
    assert not any(m.superseded for m in newest)
    assert claimer.ack(newest) == len(keys)
    stats = counters(claimer, "prices", "gpu")
    assert (stats["superseded"], stats["retried"], stats["acked"]) == (len(keys), 0,
                                                                       half + len(keys))


# -- fleet limits: a superseded delivery frees its unit when its handler stops -------------

@pytest.mark.sync_client
@pytest.mark.parametrize("stops_by", ["ack", "nack", "release", "lease_expiry"])
def test_a_superseded_delivery_gives_back_its_unit_of_max_in_flight(client, clock, stops_by):
    client.create_topic("renders", visibility_timeout=5)
    client.bind("renders", "gpu", supersede=True)
    client.set_limits("renders", "gpu", max_in_flight=1)
    client.send("renders", "product-42")
    (stale,) = client.claim("renders", "gpu")
    client.send("renders", "product-42")
    assert client.claim("renders", "gpu") == []  # the newer one waits for the unit
    if stops_by == "ack":
        assert client.ack(stale) == 1
    elif stops_by == "nack":
        assert client.nack(stale, "stopped early") == "superseded"
    elif stops_by == "release":
        assert client.release([stale]) == 1
    else:
        clock.advance(5_001)
        assert client.recover("renders") == 0  # dropped, not put back
    (newer,) = client.claim("renders", "gpu")
    assert (newer.body, newer.attempts) == (b"product-42", 1)
    assert client.ack(newer) == 1
    assert states(client, "renders", "gpu") == {"ready": [], "delayed": [], "in_flight": [],
                                                  "dead": []}
    stats = counters(client, "renders", "gpu")
    assert (stats["superseded"], stats["retried"]) == (1, 0)


@pytest.mark.sync_client  # the worker runtime runs on a Client
@pytest.mark.parametrize("ends", ["returns", "raises"])
def test_under_max_in_flight_1_the_newer_message_runs_once_the_superseded_handler_stops(
        make_client, ends):
    client = make_client("sync")
    client.create_topic("prices", merge="key")
    client.bind("prices", "gpu", supersede=True)
    client.set_limits("prices", "gpu", max_in_flight=1)
    started, order, handled = threading.Event(), [], queue.Queue()

    def render(message: rmq.Message) -> None:
        if message.body == b"price=10":
            started.set()
            assert message.wait_superseded(timeout=10)
            order.append("stale stopped")
            if ends == "raises":
                raise RuntimeError("stopped early: a newer price is pending")
            return
        order.append("newer ran")
        handled.put(message.body)

    client.send("prices", "price=10", key="product-42")
    consumer = rmq.Consumer(client, "prices", render, group="gpu", concurrency=2).start()
    try:
        assert started.wait(10)
        client.send("prices", "price=12", key="product-42")
        assert handled.get(timeout=10) == b"price=12"
    finally:
        consumer.stop()
    assert order == ["stale stopped", "newer ran"]  # never both at once: one unit
    stats = client.stats("prices").groups["gpu"]
    assert (stats.counters["superseded"], stats.counters["retried"]) == (1, 0)
    assert stats.counters["acked"] == (2 if ends == "returns" else 1)
    assert (stats.pending, stats.in_flight) == (0, 0)
