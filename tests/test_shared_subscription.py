"""Consumers sharing one client share its wake-up subscription of a topic: they take turns
on its one connection, so neither reads the other's replies."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable

import pytest
from helpers import wait_for

import rmq

RUN_FOR = 1.5  # seconds of hammering: the unsafe version broke within this in every run


def _hammer(actions: list[Callable[[], object]]) -> list[str]:
    """Run each action in a loop on its own thread for RUN_FOR seconds; the errors."""
    errors: list[str] = []
    stop = threading.Event()

    def loop(action: Callable[[], object]) -> None:
        try:
            while not stop.is_set():
                action()
        except Exception as exc:  # noqa: BLE001 - the test reports every error
            errors.append(repr(exc))

    threads = [threading.Thread(target=loop, args=(a,)) for a in actions]
    for thread in threads:
        thread.start()
    stop.wait(RUN_FOR)
    stop.set()
    for thread in threads:
        thread.join(10)
    return errors


def test_threads_waiting_and_draining_one_subscription_take_turns(redis_url):
    with rmq.Client(redis_url) as client:
        client.create_topic("jobs")
        waiter = client.waiter("jobs")
        errors = _hammer([lambda: waiter.wait(0.001), waiter.drain,
                          lambda: client.wake("jobs"), lambda: client.wake("jobs")])
        assert errors == []
        client.wake("jobs")
        assert waiter.wait(5) is True  # the subscription still works


def test_tasks_waiting_and_draining_one_subscription_take_turns(redis_url):
    async def main() -> list[str]:
        async with rmq.AsyncClient(redis_url) as client:
            await client.create_topic("jobs")
            waiter = await client.waiter("jobs")
            deadline = time.monotonic() + RUN_FOR

            async def loop(action: Callable[[], object]) -> None:
                while time.monotonic() < deadline:
                    await action()  # type: ignore[misc]

            results = await asyncio.gather(
                loop(lambda: waiter.wait(0.001)), loop(waiter.drain),
                loop(lambda: client.wake("jobs")), return_exceptions=True)
            await client.wake("jobs")
            assert await waiter.wait(5) is True
            return [repr(r) for r in results if r is not None]

    assert asyncio.run(main()) == []


def test_two_consumers_of_one_client_on_one_topic_handle_everything_without_errors(
        redis_url, caplog: pytest.LogCaptureFixture):
    caplog.set_level(logging.WARNING, logger="rmq")
    handled: list[bytes] = []
    with rmq.Client(redis_url) as client:
        client.create_topic("jobs")
        consumers = [rmq.Consumer(client, "jobs", lambda m: handled.append(m.body),
                                  concurrency=2).start() for _ in range(2)]
        try:
            for i in range(300):
                client.send("jobs", b"%d" % i)  # one at a time: each one wakes the sleepers
            wait_for(lambda: len(handled) >= 300, timeout=30, what="every message handled")
        finally:
            for consumer in consumers:
                consumer.stop()
    assert sorted(handled) == sorted(b"%d" % i for i in range(300))
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING] == []
