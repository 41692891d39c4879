"""Handlers of every shape (docs/semantics.md "Consuming"): a consumer awaits an ``async def``
function, an object whose ``__call__`` is ``async def``, a bound ``async`` method and a
``functools.partial`` of any of them, single or batch; a plain handler that returns an
awaitable fails its delivery with ``AwaitableReturned`` naming it (retried, then
dead-lettered), never acknowledging it unhandled."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from functools import partial
from typing import Any

import pytest
from core_fixtures import client_fixture, clock_fixture, make_client_fixture  # noqa: F401
from helpers import wait_for

import rmq
from rmq.errors import AwaitableReturned
from rmq.runtime.workers import refused

pytestmark = [pytest.mark.single_node, pytest.mark.sync_client]



class Handled:
    """What the handlers below record: each body they finished, after an ``await`` (so only
    a handler that was awaited records anything), and whether an event loop ran it."""

    def __init__(self) -> None:
        self.bodies: list[bytes] = []
        self.lock = threading.Lock()

    async def one(self, taken: rmq.Message | list[rmq.Message]) -> None:
        await asyncio.sleep(0)
        asyncio.get_running_loop()  # raises outside an event loop
        with self.lock:
            self.bodies += [m.body for m in (taken if isinstance(taken, list) else [taken])]


class AsyncCallable:
    def __init__(self, handled: Handled) -> None:
        self.handled = handled

    async def __call__(self, taken: Any) -> None:
        await self.handled.one(taken)


async def with_an_argument(handled: Handled, taken: Any, *, tag: str) -> None:
    assert tag == "given"
    await handled.one(taken)


SHAPES: dict[str, Callable[[Handled], Callable[..., Any]]] = {
    "an object with async __call__": AsyncCallable,
    "a partial of an async function": lambda h: partial(with_an_argument, h, tag="given"),
    "a bound async method": lambda h: h.one,
    "a partial of an async callable object": lambda h: partial(AsyncCallable(h)),
}


@pytest.mark.parametrize("batch", [None, 4], ids=["single", "batch"])
@pytest.mark.parametrize("shape", SHAPES)
def test_every_async_shape_of_handler_is_awaited_and_its_messages_acknowledged(
        make_client, consumers, shape, batch):
    producer = make_client()
    producer.create_topic("t", max_retries=0)
    producer.send_many("t", [b"a", b"b", b"c", b"d", b"e"])
    handled = Handled()
    consumer = consumers(make_client(), "t", SHAPES[shape](handled), batch=batch,
                         concurrency=2)
    wait_for(lambda: consumer.handled == 5, what="5 handled")
    assert sorted(handled.bodies) == [b"a", b"b", b"c", b"d", b"e"]
    assert producer.stats("t").groups["default"].counters["acked"] == 5
    assert producer.dead_letters("t") == []


def test_cancel_superseded_is_accepted_for_an_object_whose_call_is_async(make_client):
    client = make_client()
    client.create_topic("t")
    consumer = rmq.Consumer(client, "t", AsyncCallable(Handled()), cancel_superseded=True)
    assert consumer.handler is not None


def test_the_handler_decorator_awaits_an_object_whose_call_is_async(make_client):
    producer, client = make_client(), make_client()
    producer.create_topic("t")
    handled = Handled()
    decorated = client.handler("t", heartbeat_interval=60)(AsyncCallable(handled))
    consumer = decorated.consumer.start()
    try:
        producer.send("t", b"x")
        wait_for(lambda: consumer.handled == 1, what="1 handled")
    finally:
        consumer.stop(grace=1)
    assert handled.bodies == [b"x"]


@pytest.mark.parametrize("batch", [None, 2], ids=["single", "batch"])
def test_a_plain_handler_returning_an_awaitable_fails_its_delivery_naming_the_handler(
        make_client, consumers, batch, recwarn):
    producer = make_client()
    producer.create_topic("t", max_retries=1, retry_backoff=0)
    producer.send_many("t", [b"a", b"b"])
    handled = Handled()

    def forgets_to_await(taken: Any) -> Any:
        return handled.one(taken)  # a coroutine, never awaited by a thread

    consumer = consumers(make_client(), "t", forgets_to_await, batch=batch, concurrency=1)
    dead = wait_for(lambda: len(producer.dead_letters("t")) == 2 and producer.dead_letters("t"),
                    what="both dead-lettered after their 2 attempts")
    assert {(d.body, d.attempts) for d in dead} == {(b"a", 2), (b"b", 2)}
    for letter in dead:
        assert letter.error.startswith(
            "AwaitableReturned: handler test_a_plain_handler_returning_an_awaitable_fails_its_"
            "delivery_naming_the_handler.<locals>.forgets_to_await is not async but returned "
            "coroutine"), letter.error
    assert handled.bodies == []
    assert consumer.handled == 0
    assert producer.stats("t").groups["default"].counters["acked"] == 0
    assert not [w for w in recwarn if "never awaited" in str(w.message)]


def test_a_refused_partial_is_named_by_its_function_and_its_coroutine_closed():
    ran: list[int] = []

    async def render(message: Any, size: int) -> None:
        ran.append(size)

    coroutine = render(None, 1)
    error = refused(partial(render, size=1), coroutine)
    assert isinstance(error, AwaitableReturned) and isinstance(error, rmq.RMQError)
    assert "handler test_a_refused_partial_is_named_by_its_function_and_its_coroutine_closed." \
        "<locals>.render is not async but returned coroutine" in str(error)
    assert coroutine.cr_frame is None and ran == []  # closed, never run
