"""Consumers of several groups served by one client (``client.run()`` with a ``@handler`` per
group): each group drains at its own pace, whatever the others find to do. A group whose
filter leaves it idle does not hold back a group with a backlog, and a wake-up reaches every
consumer sleeping on the topic, not just one of them."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time

from helpers import wait_for

import rmq

MESSAGES = 10_000
DEADLINE = 10.0  # seconds for both groups to drain: they take about one (starved: over 40)
SLEEP = 5.0  # seconds a sleeper sleeps unless woken


class Handled:
    """The bodies a group's handler saw, from any thread."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.lock = threading.Lock()

    def __call__(self, message: rmq.Message) -> None:
        with self.lock:
            self.bodies.append(message.body)

    def __len__(self) -> int:
        with self.lock:
            return len(self.bodies)


def test_a_filtered_group_does_not_starve_an_unfiltered_group_of_the_same_client(redis_url):
    with rmq.Client(redis_url) as client:
        client.create_topic("jobs", slots=4)
        client.bind("jobs", "even", where="half = 0")
        client.bind("jobs", "all")
        client.send_many("jobs", [{"body": b"%d" % i, "properties": {"half": i % 2}}
                                  for i in range(MESSAGES)])
        even, every = Handled(), Handled()
        consumers = [rmq.Consumer(client, "jobs", even, group="even", heartbeat_interval=60),
                     rmq.Consumer(client, "jobs", every, group="all", heartbeat_interval=60)]
        for consumer in consumers:
            consumer.start()
        try:
            wait_for(lambda: len(even) >= MESSAGES // 2 and len(every) >= MESSAGES,
                     timeout=DEADLINE, what="both groups drained")
        finally:
            for consumer in consumers:
                consumer.stop(grace=1)
    assert sorted(every.bodies) == sorted(b"%d" % i for i in range(MESSAGES))
    assert sorted(even.bodies) == sorted(b"%d" % i for i in range(0, MESSAGES, 2))



def test_async_handlers_of_a_filtered_and_an_unfiltered_group_run_by_one_async_client_drain(
        redis_url):
    even, every = Handled(), Handled()

    async def main() -> None:
        async with rmq.AsyncClient(redis_url) as client:
            await client.create_topic("jobs", slots=4)
            await client.bind("jobs", "even", where="half = 0")
            await client.bind("jobs", "all")
            await client.send_many("jobs", [{"body": b"%d" % i, "properties": {"half": i % 2}}
                                            for i in range(MESSAGES)])

            @client.handler("jobs", group="even", heartbeat_interval=60)
            async def on_even(message: rmq.Message) -> None:
                even(message)

            @client.handler("jobs", group="all", heartbeat_interval=60)
            async def on_every(message: rmq.Message) -> None:
                every(message)

            running = asyncio.create_task(client.run())
            try:
                deadline = time.monotonic() + DEADLINE
                while len(even) < MESSAGES // 2 or len(every) < MESSAGES:
                    assert time.monotonic() < deadline, (
                        f"both groups drained: {len(even)} and {len(every)} after {DEADLINE} s")
                    await asyncio.sleep(0.01)  # polled, with the deadline above
            finally:
                running.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await running

    asyncio.run(main())
    assert sorted(every.bodies) == sorted(b"%d" % i for i in range(MESSAGES))
    assert sorted(even.bodies) == sorted(b"%d" % i for i in range(0, MESSAGES, 2))

def test_a_wake_up_reaches_every_thread_sleeping_on_the_topic(redis_url):
    with rmq.Client(redis_url) as client:
        client.create_topic("jobs")
        waiter = client.waiter("jobs")
        drained = [threading.Event(), threading.Event()]
        woke: list[bool] = []

        def sleep(index: int) -> None:
            waiter.drain()
            drained[index].set()
            woke.append(waiter.wait(SLEEP))

        threads = [threading.Thread(target=sleep, args=(i,)) for i in range(2)]
        for thread in threads:
            thread.start()
        for event in drained:
            assert event.wait(SLEEP)
        started = time.monotonic()
        client.wake("jobs")
        for thread in threads:
            thread.join(2 * SLEEP)
        assert woke == [True, True]
        assert time.monotonic() - started < SLEEP / 2


def test_a_drain_does_not_wait_for_another_threads_sleep(redis_url):
    with rmq.Client(redis_url) as client:
        client.create_topic("jobs")
        waiter = client.waiter("jobs")
        sleeper = threading.Thread(target=waiter.wait, args=(SLEEP,))
        sleeper.start()
        longest = 0.0
        try:
            # drains (a consumer's, before each claim) for a while, the sleeper asleep all along
            until = time.monotonic() + 0.5
            while time.monotonic() < until:
                started = time.monotonic()
                waiter.drain()
                longest = max(longest, time.monotonic() - started)
        finally:
            client.wake("jobs")
            sleeper.join(2 * SLEEP)
        assert longest < SLEEP / 2


def test_a_wake_up_reaches_every_task_sleeping_on_the_topic_and_drains_do_not_wait(redis_url):
    async def main() -> tuple[list[bool], float, float]:
        async with rmq.AsyncClient(redis_url) as client:
            await client.create_topic("jobs")
            waiter = await client.waiter("jobs")
            drained = [asyncio.Event(), asyncio.Event()]

            async def sleep(index: int) -> bool:
                await waiter.drain()
                drained[index].set()
                return await waiter.wait(SLEEP)

            sleepers = [asyncio.create_task(sleep(i)) for i in range(2)]
            for event in drained:
                await asyncio.wait_for(event.wait(), SLEEP)
            await asyncio.sleep(0)  # both tasks now sleep in wait
            started = time.monotonic()
            await waiter.drain()  # while they sleep
            drain_took = time.monotonic() - started
            await client.wake("jobs")
            woke = await asyncio.wait_for(asyncio.gather(*sleepers), 2 * SLEEP)
            return list(woke), drain_took, time.monotonic() - started

    woke, drain_took, wake_took = asyncio.run(main())
    assert woke == [True, True]
    assert drain_took < SLEEP / 2 and wake_took < SLEEP / 2
