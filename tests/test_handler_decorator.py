"""``@client.handler(topic, ...)`` makes a function a consumer of the topic; ``client.run()``
runs every decorated consumer until stopped."""

from __future__ import annotations

import asyncio
import contextlib
import threading

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import wait_for

import rmq

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]


def test_decorated_function_stays_callable_and_carries_its_consumer(make_client):
    c = make_client()
    c.create_topic("t")

    @c.handler("t", group="renderers", concurrency=3)
    def render(message: rmq.Message) -> str:
        return message.text.upper()

    consumer = render.consumer
    assert isinstance(consumer, rmq.Consumer)
    assert (consumer.topic, consumer.group, consumer.concurrency) == ("t", "renderers", 3)
    assert consumer.handler is render
    assert not consumer.running
    assert c.topic("t", fresh=True).bound_groups == ()  # nothing starts before run()


def test_run_serves_every_decorated_handler_until_they_stop(make_client):
    producer = make_client()
    worker = make_client()
    producer.create_topic("prices")
    producer.create_topic("stock")
    seen: list[tuple[str, bytes]] = []

    @worker.handler("prices", heartbeat_interval=60)
    def on_price(message: rmq.Message) -> None:
        seen.append(("prices", message.body))

    @worker.handler("stock", heartbeat_interval=60)
    async def on_stock(message: rmq.Message) -> None:
        seen.append(("stock", message.body))

    runner = threading.Thread(target=worker.run)
    runner.start()
    try:
        wait_for(lambda: on_price.consumer.running and on_stock.consumer.running,
                 what="both consumers running")
        producer.topic("prices", fresh=True)
        producer.topic("stock", fresh=True)
        producer.send("prices", b"p1")
        producer.send("stock", b"s1")
        wait_for(lambda: len(seen) == 2, what="both handled")
    finally:
        on_price.consumer.stop(grace=1)
        runner.join(10)
    assert not runner.is_alive()
    assert not on_stock.consumer.running
    assert sorted(seen) == [("prices", b"p1"), ("stock", b"s1")]


def test_a_raising_decorated_handler_retries(make_client):
    producer = make_client()
    worker = make_client()
    producer.create_topic("t", retry_backoff=0)
    attempts = []

    @worker.handler("t", heartbeat_interval=60)
    def flaky(message: rmq.Message) -> None:
        attempts.append(message.attempts)
        if message.attempts < 3:
            raise RuntimeError("not yet")

    flaky.consumer.start()
    try:
        producer.send("t", b"x")
        wait_for(lambda: producer.stats("t").groups["default"].counters["acked"] == 1,
                 what="acked on the third attempt")
    finally:
        flaky.consumer.stop(grace=1)
    assert attempts == [1, 2, 3]


def test_a_decorated_batch_handler_gets_lists_of_its_batch(make_client):
    producer = make_client()
    worker = make_client()
    producer.create_topic("t")
    producer.send_many("t", [f"m{i}" for i in range(7)])
    batches: list[int] = []

    @worker.handler("t", batch=4, batch_wait_ms=10, concurrency=1, heartbeat_interval=60)
    def render(messages: list[rmq.Message]) -> None:
        batches.append(len(messages))

    assert (render.consumer.batch, render.consumer.batch_wait_ms) == (4, 10)
    render.consumer.start()
    try:
        wait_for(lambda: producer.stats("t").groups["default"].counters["acked"] == 7,
                 what="7 acked")
    finally:
        render.consumer.stop(grace=1)
    assert sorted(batches) == [3, 4]


def test_an_async_clients_decorated_batch_handler_gets_lists_of_its_batch(redis_url):
    async def main() -> list[list[bytes]]:
        async with rmq.AsyncClient(redis_url) as client:
            await client.create_topic("t")
            loop = asyncio.get_running_loop()
            seen: asyncio.Queue[list[bytes]] = asyncio.Queue()

            @client.handler("t", batch=3, concurrency=1, heartbeat_interval=60)
            async def render(messages: list[rmq.Message]) -> None:
                loop.call_soon_threadsafe(seen.put_nowait, sorted(m.body for m in messages))

            await client.send_many("t", [b"a", b"b", b"c"])
            running = asyncio.create_task(client.run())
            batch = await seen.get()
            running.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await running
            stats = (await client.stats("t")).groups["default"]
            assert (stats.in_flight, stats.counters["acked"]) == (0, 3)
            return [batch]

    assert asyncio.run(main()) == [[b"a", b"b", b"c"]]
