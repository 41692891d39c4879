"""``rmq.AsyncClient``: the same queue as ``rmq.Client``, awaited, against a real server."""

from __future__ import annotations

import asyncio
import time

import pytest
from helpers import ManualClock
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

import rmq
from rmq import errors
from rmq.storage.keys import wake_channel

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture
async def aclient(redis_url: str):
    clock = ManualClock()
    async with rmq.AsyncClient(redis_url, clock=clock) as client:
        client.test_clock = clock  # type: ignore[attr-defined]
        yield client


async def test_sends_of_an_identical_pending_body_merge(aclient: rmq.AsyncClient) -> None:
    await aclient.create_topic("prices", slots=4)
    first = await aclient.send("prices", b"sku-1")
    second = await aclient.send("prices", "sku-1")
    counts = await aclient.send_many("prices", [b"sku-1", b"sku-2", {"json": {"b": 1, "a": 2}}])
    again = await aclient.send("prices", json={"a": 2, "b": 1})
    assert (first.merged, second.merged, again.merged) == (False, True, True)
    assert second.slot == first.slot
    assert counts == rmq.SendCounts(sent=3, merged=1)
    assert (await aclient.stats("prices")).groups["default"].ready == 3


async def test_claim_serves_higher_priority_first_and_ack_removes(
        aclient: rmq.AsyncClient) -> None:
    await aclient.create_topic("jobs", slots=1)  # strict priority on a cluster too
    await aclient.send("jobs", b"low", priority=rmq.Priority.LOW)
    await aclient.send("jobs", b"high", priority=rmq.Priority.HIGH)
    await aclient.send("jobs", b"medium")
    claimed = await aclient.claim("jobs", count=10)
    assert [m.body for m in claimed] == [b"high", b"medium", b"low"]
    assert all(m.attempts == 1 for m in claimed)
    assert await aclient.ack(claimed) == 3
    stats = (await aclient.stats("jobs")).groups["default"]
    assert (stats.ready, stats.in_flight, stats.counters["acked"]) == (0, 0, 3)


async def test_released_message_comes_back_without_counting_an_attempt(
        aclient: rmq.AsyncClient) -> None:
    await aclient.create_topic("jobs")
    await aclient.send("jobs", b"x")
    (message,) = await aclient.claim("jobs")
    assert await aclient.extend(message, 60) == [True]
    assert await aclient.release([message]) == 1
    (again,) = await aclient.claim("jobs")
    assert (again.body, again.attempts) == (b"x", 1)


async def test_expired_lease_is_recovered_and_redelivered(aclient: rmq.AsyncClient) -> None:
    clock: ManualClock = aclient.test_clock  # type: ignore[attr-defined]
    await aclient.create_topic("jobs", retry_backoff=0)
    await aclient.send("jobs", b"x")
    assert len(await aclient.claim("jobs", lease=1)) == 1
    clock.advance(2_000)
    assert await aclient.recover("jobs") == 1
    (again,) = await aclient.claim("jobs")
    assert again.attempts == 2


async def test_nacked_message_retries_then_becomes_a_dead_letter(
        aclient: rmq.AsyncClient) -> None:
    await aclient.create_topic("jobs", max_retries=1, retry_backoff=0)
    await aclient.send("jobs", b"poison")
    (first,) = await aclient.claim("jobs")
    assert await aclient.nack(first, ValueError("bad input")) == "retried"
    (second,) = await aclient.claim("jobs")
    assert await aclient.nack(second, "still bad") == "dead"
    assert await aclient.claim("jobs") == []
    (letter,) = await aclient.dead_letters("jobs")
    assert (letter.body, letter.attempts, letter.error) == (b"poison", 2, "still bad")
    assert await aclient.requeue_dead("jobs", ids=[letter.id]) == 1
    (third,) = await aclient.claim("jobs")
    assert (third.body, third.attempts) == (b"poison", 1)
    assert await aclient.nack(third) == "retried"
    (fourth,) = await aclient.claim("jobs")
    await aclient.nack(fourth)
    assert await aclient.purge_dead("jobs") == 1
    assert await aclient.dead_letters("jobs") == []


async def test_claim_with_wait_wakes_when_a_message_is_sent(redis_url: str) -> None:
    async with rmq.AsyncClient(redis_url) as consumer, rmq.AsyncClient(redis_url) as producer:
        await consumer.create_topic("jobs")
        waiting = asyncio.create_task(consumer.claim("jobs", wait=30))
        with rmq.Client(redis_url) as probe:  # counts subscribers on every cluster node too
            channel = wake_channel("jobs")
            while not waiting.done() and not dict(probe.redis.pubsub_numsub(channel)).get(
                    channel.encode()):
                await asyncio.sleep(0)  # let the claim task run until it has subscribed
        started = time.monotonic()
        await producer.send("jobs", b"wake up")
        (message,) = await waiting
        assert message.body == b"wake up"
        assert time.monotonic() - started < 5


async def test_claim_with_wait_returns_a_delayed_message_once_due(redis_url: str) -> None:
    async with rmq.AsyncClient(redis_url) as client:
        await client.create_topic("later")
        await client.send("later", b"soon", delay_ms=150)
        assert await client.claim("later") == []
        (message,) = await client.claim("later", wait=10)
        assert message.body == b"soon"
        assert time.time() * 1000 >= message.due_at


async def test_claim_with_wait_gives_up_empty_after_the_timeout(
        aclient: rmq.AsyncClient) -> None:
    await aclient.create_topic("idle")
    assert await aclient.claim("idle", wait=0.1) == []


async def test_registry_changes_and_snapshot(aclient: rmq.AsyncClient) -> None:
    await aclient.create_topic("t", slots=2)
    assert await aclient.topics() == ["t"]
    assert await aclient.bind("t", "audit") is True
    await aclient.send("t", b"one")
    await aclient.pause("t")
    assert await aclient.claim("t", "audit") == []
    await aclient.resume("t")
    assert (await aclient.alter_topic("t", max_retries=3)).max_retries == 3
    rows = [row async for row in aclient.snapshot("t")]
    assert [(r.group, r.state, r.body) for r in rows] == [("audit", "ready", b"one")]
    stats = await aclient.stats("t")
    assert stats.to_dict()["groups"]["audit"]["ready"] == 1
    assert await aclient.consumers("t") == []
    assert await aclient.unbind("t", "audit") is True
    await aclient.delete_topic("t")
    assert await aclient.topics() == []


async def test_errors_are_the_typed_rmq_errors(aclient: rmq.AsyncClient) -> None:
    with pytest.raises(errors.UnknownTopic, match="nope"):
        await aclient.send("nope", b"x")
    await aclient.create_topic("t")
    with pytest.raises(errors.TopicConflict):
        await aclient.create_topic("t", slots=16)
    with pytest.raises(errors.InvalidPriority):
        await aclient.send("t", b"x", priority=300)
    with pytest.raises(errors.ConflictingOptions):
        await aclient.send("t", b"x", delay_ms=10, deliver_at=2**50)
    with pytest.raises(errors.InvalidMessage, match="batch item 1"):
        await aclient.send_many("t", [b"ok", 42])
    assert (await aclient.stats("t")).groups["default"].ready == 0


async def test_out_of_memory_and_unreachable_redis_raise_typed_errors(fresh_server) -> None:
    server = fresh_server()
    async with rmq.AsyncClient(server.url, retry=Retry(NoBackoff(), 1)) as client:
        await client.create_topic("t")
        with server.client() as admin:
            admin.config_set("maxmemory", 1)
        with pytest.raises(errors.RedisOutOfMemory):
            await client.send("t", b"x")
        server.kill()
        with pytest.raises(errors.RedisUnavailable):
            await client.send("t", b"y")


async def test_async_client_works_on_a_cluster(cluster_url: str) -> None:
    async with rmq.AsyncClient(cluster_url) as client:
        assert client.is_cluster
        await client.create_topic("spread", slots=8)
        counts = await client.send_many("spread", [f"m{i}" for i in range(50)] + ["m1"])
        assert counts == rmq.SendCounts(51, 1)
        claimed = await client.claim("spread", count=100)
        assert sorted(m.body for m in claimed) == sorted(f"m{i}".encode() for i in range(50))
        assert await client.ack(claimed) == 50


async def test_handler_consumers_run_until_cancelled(redis_url: str) -> None:
    async with rmq.AsyncClient(redis_url) as client:
        await client.create_topic("jobs")
        loop = asyncio.get_running_loop()
        seen: asyncio.Queue[bytes] = asyncio.Queue()

        @client.handler("jobs", concurrency=2)
        async def handle(message: rmq.Message) -> None:  # runs on the consumer's own loop
            loop.call_soon_threadsafe(seen.put_nowait, message.body)

        running = asyncio.create_task(client.run())
        await client.send_many("jobs", [b"a", b"b", b"c"])
        assert sorted([await seen.get() for _ in range(3)]) == [b"a", b"b", b"c"]
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running
        stats = (await client.stats("jobs")).groups["default"]
        assert (stats.ready, stats.in_flight, stats.counters["acked"]) == (0, 0, 3)
        assert await client.consumers("jobs") == []


async def test_claim_acknowledges_the_previous_batch_in_the_same_round_trip(
        aclient: rmq.AsyncClient) -> None:
    await aclient.create_topic("t")
    await aclient.send_many("t", [b"a", b"b", b"c"])
    first = await aclient.claim("t", count=2)
    rest = await aclient.claim("t", count=2, ack=first)
    assert sorted(m.body for m in first + rest) == [b"a", b"b", b"c"]
    assert await aclient.claim("t", ack=rest) == []
    stats = (await aclient.stats("t")).groups["default"]
    assert (stats.ready, stats.in_flight, stats.counters["acked"]) == (0, 0, 3)
